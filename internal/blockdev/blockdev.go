// Package blockdev says where a file's bytes are on the disk: its device
// and inode in the kernel's encoding, its FIEMAP extents, the block device
// (partition and whole disk) that holds it, and /proc/diskstats.
package blockdev

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/internal/kernel"
)

// FileID is what the kernel's events name a file by.
type FileID struct {
	Dev  uint32 // kernel encoding: major<<20 | minor
	Ino  uint64
	Size int64
	// Major and Minor are the device numbers as userspace sees them.
	Major, Minor uint32
}

// StatFile returns a file's device and inode in the kernel's encoding.
func StatFile(path string) (FileID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return FileID{}, fmt.Errorf("stat %s: %w", path, err)
	}
	return fileID(&st), nil
}

// fileID is the identity a stat gives.
func fileID(st *unix.Stat_t) FileID {
	maj, min := unix.Major(st.Dev), unix.Minor(st.Dev)
	return FileID{Dev: kernel.Dev(maj, min), Ino: st.Ino, Size: st.Size, Major: maj, Minor: min}
}

// fiemap ioctl layout (linux/fiemap.h).
type fiemapHeader struct {
	Start, Length                             uint64
	Flags, MappedExtents, ExtentCount, Unused uint32
}

type fiemapExtent struct {
	Logical, Physical, Length uint64
	Reserved64                [2]uint64
	Flags                     uint32
	Reserved                  [3]uint32
}

const (
	fsIocFiemap        = 0xc020660b
	fiemapFlagSync     = 0x1
	fiemapExtentLast   = 0x1
	fiemapBatchExtents = 512
)

// Extents lists where a file's bytes are on its block device (FIEMAP),
// with physical offsets relative to the start of the partition. Block
// events are then mapped back to file offsets through them.
func Extents(path string) ([]kernel.Extent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	var out []kernel.Extent
	buf := make([]byte, int(unsafe.Sizeof(fiemapHeader{}))+fiemapBatchExtents*int(unsafe.Sizeof(fiemapExtent{})))
	start := uint64(0)
	for start < uint64(st.Size()) {
		for i := range buf {
			buf[i] = 0
		}
		h := (*fiemapHeader)(unsafe.Pointer(&buf[0]))
		h.Start = start
		h.Length = ^uint64(0) - start
		h.Flags = fiemapFlagSync
		h.ExtentCount = fiemapBatchExtents
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fsIocFiemap, uintptr(unsafe.Pointer(&buf[0]))); errno != 0 {
			return nil, fmt.Errorf("FIEMAP %s: %w", path, errno)
		}
		if h.MappedExtents == 0 {
			break
		}
		exts := unsafe.Slice((*fiemapExtent)(unsafe.Pointer(&buf[unsafe.Sizeof(fiemapHeader{})])), h.MappedExtents)
		last := false
		for _, e := range exts {
			out = append(out, kernel.Extent{Logical: e.Logical, Physical: e.Physical, Length: e.Length, Flags: e.Flags})
			start = e.Logical + e.Length
			last = last || e.Flags&fiemapExtentLast != 0
		}
		if last {
			break
		}
	}
	return out, nil
}

// OfFile is Of the file at path.
func OfFile(path string) (kernel.BlockDevice, error) {
	id, err := StatFile(path)
	if err != nil {
		return kernel.BlockDevice{}, err
	}
	return Of(id)
}

// Of describes the block device holding a file: the partition
// (or whole disk), the whole disk's dev that block events carry, and the
// partition's start so that a request's sector maps into the partition.
func Of(id FileID) (kernel.BlockDevice, error) {
	bd, _, err := of(id)
	return bd, err
}

// of is Of and the sysfs directory of the whole disk, whose queue holds
// what a partition's requests are limited by (a partition has no queue).
func of(id FileID) (kernel.BlockDevice, string, error) {
	sys := fmt.Sprintf("/sys/dev/block/%d:%d", id.Major, id.Minor)
	real, err := filepath.EvalSymlinks(sys)
	if err != nil {
		return kernel.BlockDevice{}, "", fmt.Errorf("%d:%d is not a block device (a virtual file system?): %w", id.Major, id.Minor, err)
	}
	bd := kernel.BlockDevice{Name: filepath.Base(real), Dev: id.Dev, DiskDev: id.Dev, LogicalBlock: 512}
	if _, err := os.Stat(filepath.Join(real, "partition")); err == nil {
		start, err := readUint(filepath.Join(real, "start"))
		if err != nil {
			return bd, "", fmt.Errorf("reading partition start of %s: %w", bd.Name, err)
		}
		bd.PartStartSector = start
		disk := filepath.Dir(real)
		maj, min, err := readDev(filepath.Join(disk, "dev"))
		if err != nil {
			return bd, "", err
		}
		bd.DiskDev = kernel.Dev(maj, min)
		real = disk
	}
	if v, err := readUint(filepath.Join(real, "queue", "logical_block_size")); err == nil {
		bd.LogicalBlock = int(v)
	}
	if v, err := readUint(filepath.Join(real, "queue", "read_ahead_kb")); err == nil {
		bd.ReadAheadKB = &v
	}
	return bd, real, nil
}

// defaultWillNeedChunk is the WILLNEED call's size where the device's
// read-ahead is unknown: Linux's default read_ahead_kb.
const defaultWillNeedChunk = 128 << 10

// WillNeedChunk is the most one WILLNEED (or readahead(2)) call on the
// open file f reads: the larger of its disk's read-ahead and largest
// request (force_page_cache_ra reads up to max(io_pages, ra_pages),
// mm/readahead.c); the kernel silently drops the rest of a larger call.
// At a read-ahead of 128 KiB on the lab's disk (max_sectors_kb 4096) one
// call read 4 MiB, not 128 KiB: asking in read-ahead-sized calls made 32
// times the calls and requests of 128 KiB.
func WillNeedChunk(f *os.File) int64 {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return defaultWillNeedChunk
	}
	bd, disk, err := of(fileID(&st))
	if err != nil {
		return defaultWillNeedChunk
	}
	if c, ok := requestChunk(bd.ReadAheadKB, filepath.Join(disk, "queue")); ok {
		return c
	}
	return defaultWillNeedChunk
}

// requestChunk is the larger of a disk's read-ahead (KiB) and its
// queue's max_sectors_kb, in bytes; ok is false where the disk has no
// read-ahead.
func requestChunk(readAheadKB *uint64, queue string) (int64, bool) {
	if readAheadKB == nil || *readAheadKB < 4 {
		return 0, false
	}
	ms, _ := readUint(filepath.Join(queue, "max_sectors_kb"))
	return int64(max(*readAheadKB, ms)) << 10, true
}

// DiskName is the name of the whole disk for a block device (what
// /proc/diskstats lists).
func DiskName(bd kernel.BlockDevice) string {
	sys := "/sys/dev/block/" + kernel.DevString(bd.DiskDev)
	if real, err := filepath.EvalSymlinks(sys); err == nil {
		return filepath.Base(real)
	}
	return bd.Name
}

func readUint(p string) (uint64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}

func readDev(p string) (uint32, uint32, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, 0, err
	}
	var maj, min uint32
	if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "%d:%d", &maj, &min); err != nil {
		return 0, 0, fmt.Errorf("parsing %s: %w", p, err)
	}
	return maj, min, nil
}

// DiskStats reads /proc/diskstats for the named devices (all if none).
func DiskStats(names ...string) ([]kernel.DiskStat, error) {
	f, err := os.Open("/proc/diskstats")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var out []kernel.DiskStat
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 10 || (len(want) > 0 && !want[fl[2]]) {
			continue
		}
		u := func(i int) uint64 { v, _ := strconv.ParseUint(fl[i], 10, 64); return v }
		out = append(out, kernel.DiskStat{
			Name: fl[2], Major: uint32(u(0)), Minor: uint32(u(1)),
			Reads: u(3), SectorsRead: u(5), ReadTicksMS: u(6), Writes: u(7), SectorsWritten: u(9),
		})
	}
	return out, sc.Err()
}

// sysDevBlock is where sysfs names block devices by major:minor; tests of
// stacks the lab's kernel cannot build (it has no device mapper) point it
// at a tree of their own.
var sysDevBlock = "/sys/dev/block"

// Stack is what a whole disk is built on: a loop device's backing file
// (its requests are read again from that file, at the file's own disk),
// or the devices a device-mapper or md device sends its I/O to (Slaves),
// whose requests carry their own sectors, not the disk's. A disk is on
// neither.
type Stack struct {
	// Backing is the loop device's backing file, "" for no loop device;
	// Offset the byte of it the loop device's first sector is.
	Backing string
	Offset  uint64
	// Slaves names the devices beneath a device-mapper or md device.
	Slaves []string
}

// StackOf says what the whole disk diskDev is built on.
func StackOf(diskDev uint32) (Stack, error) {
	sys := filepath.Join(sysDevBlock, kernel.DevString(diskDev))
	var s Stack
	if b, err := os.ReadFile(filepath.Join(sys, "loop", "backing_file")); err == nil {
		// A backing file removed since it was bound still backs the
		// device: sysfs adds " (deleted)" to its path, which then stats
		// as no file, and the caller says so.
		s.Backing = strings.TrimSpace(string(b))
		if s.Offset, err = readUint(filepath.Join(sys, "loop", "offset")); err != nil {
			return s, fmt.Errorf("reading the loop offset of %s: %w", kernel.DevString(diskDev), err)
		}
		return s, nil
	} else if !os.IsNotExist(err) {
		return s, fmt.Errorf("reading the backing file of %s: %w", kernel.DevString(diskDev), err)
	}
	ents, err := os.ReadDir(filepath.Join(sys, "slaves"))
	if err != nil && !os.IsNotExist(err) {
		return s, fmt.Errorf("listing the devices beneath %s: %w", kernel.DevString(diskDev), err)
	}
	for _, e := range ents {
		s.Slaves = append(s.Slaves, e.Name())
	}
	return s, nil
}
