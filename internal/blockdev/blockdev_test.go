package blockdev

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/internal/pagecache"
	"github.com/iocorr/iocorr/testkit/testenv"
	"github.com/iocorr/iocorr/wire"
)

func TestExtentsCoverTheFileAndTheDiskReadsTheirSectors(t *testing.T) {
	testenv.RequireRoot(t)
	const size = 3<<20 + 123
	p := diskFile(t, size)
	if _, _, err := pagecache.Evict(p); err != nil { // forces allocation (delalloc)
		t.Fatal(err)
	}
	exts, err := Extents(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(exts) == 0 {
		t.Fatal("no extents")
	}
	var next uint64
	for _, e := range exts {
		if e.Logical != next {
			t.Fatalf("extent at %d, want %d (a hole?) in %+v", e.Logical, next, exts)
		}
		next = e.Logical + e.Length
	}
	if next < size {
		t.Fatalf("extents end at %d, file is %d", next, size)
	}
	id, err := StatFile(p)
	if err != nil {
		t.Fatal(err)
	}
	bd, err := Of(id)
	if err != nil {
		t.Fatal(err)
	}
	if bd.DiskDev == 0 || bd.Name == "" || bd.LogicalBlock < 512 {
		t.Fatalf("block device %+v", bd)
	}
	// The decisive check: a cold read of the file makes the disk read
	// exactly the extents' sectors. (Reading the device itself to compare
	// bytes would be simpler, but opening /dev/vda is refused even to
	// root on this VM.) The tracer sees every block request on the disk,
	// other people's too: the file's sectors must be covered, whatever
	// else was read. Only the file's disk is traced, so that other tests'
	// I/O on other devices cannot crowd the ring.
	tr, err := bpf.Open(bpf.Options{RingBufBytes: 16 << 20, Devices: []uint32{bd.DiskDev}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	// A page the eviction could not drop (held for a moment by reclaim or
	// an LRU batch of a busy machine) is served from memory: it needs no
	// read, and is left out of the check, by name.
	resident, nres, err := pagecache.ResidentRanges(p)
	if err != nil {
		t.Fatal(err)
	}
	if pages := int64(size+4095) / 4096; nres > pages/8 {
		t.Fatalf("%d of the file's %d pages stayed resident after its eviction: too few reads left to check", nres, pages)
	}
	if len(resident) > 0 {
		t.Logf("resident before the read, not expected on the disk: page ranges %v", resident)
	}
	if _, err := os.ReadFile(p); err != nil {
		t.Fatal(err)
	}
	var reads [][2]uint64 // disk byte ranges read
	rd := tr.RingBuf()
	var rec ringbuf.Record
	for {
		rd.SetDeadline(time.Now().Add(200 * time.Millisecond))
		if err := rd.ReadInto(&rec); err != nil {
			break
		}
		if len(rec.RawSample) < int(unsafe.Sizeof(wire.BlockEvent{})) {
			continue
		}
		e := (*wire.BlockEvent)(unsafe.Pointer(&rec.RawSample[0]))
		if e.Hdr.Type == uint16(wire.EventTypeEV_BLOCK) && e.Dev == bd.DiskDev && kernel.BlockOpOf(e.CmdFlags) == kernel.BlockRead {
			reads = append(reads, [2]uint64{e.Sector * 512, e.Sector*512 + uint64(e.Bytes)})
		}
	}
	// Requests whose completion BPF has not seen (now and then on this
	// VM, never at all) are recorded from their issue, as a run does.
	unfinished, err := tr.TakeUnfinishedBlockRequests(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range unfinished {
		if e.Dev == bd.DiskDev && kernel.BlockOpOf(e.CmdFlags) == kernel.BlockRead {
			reads = append(reads, [2]uint64{e.Sector * 512, e.Sector*512 + uint64(e.Bytes)})
		}
	}
	lost, err := tr.Lost()
	if err != nil {
		t.Fatal(err)
	}
	if n := lost[wire.EventTypeName(uint32(wire.EventTypeEV_BLOCK))]; n > 0 {
		t.Fatalf("%d block events lost: the reads cannot be checked", n)
	}
	wasResident := func(page int64) bool {
		for _, r := range resident {
			if r[0] <= page && page < r[1] {
				return true
			}
		}
		return false
	}
	for _, e := range exts {
		n := min(e.Length, (size-e.Logical+4095)&^4095) // the file's pages in this extent
		from := bd.PartStartSector*512 + e.Physical
		for off := from; off < from+n; off += 4096 {
			fileOff := e.Logical + off - from
			covered := wasResident(int64(fileOff / 4096))
			for _, r := range reads {
				covered = covered || r[0] <= off && off+4096 <= r[1]
			}
			if !covered {
				t.Fatalf("file byte %d (disk sector %d) was not read by any of %d block reads of %s: reads %v, extents %+v, partition start sector %d",
					fileOff, off/512, len(reads), bd.Name, reads, exts, bd.PartStartSector)
			}
		}
	}
	t.Logf("%d extents on %s (partition start %d, disk %d:%d), covered by %d block reads", len(exts), bd.Name, bd.PartStartSector, bd.DiskDev>>20, bd.DiskDev&0xfffff, len(reads))
}

func TestExtentsListsEveryExtentOfAFragmentedFile(t *testing.T) {
	testenv.RequireRoot(t)
	// One block of data every other block: each is an extent of its own,
	// more than one FIEMAP call returns (512 a batch).
	const blocks = 1300
	p := diskFile(t, 0)
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	blk := bytes.Repeat([]byte{0xa5}, 4096)
	for i := 0; i < blocks; i++ {
		if _, err := f.WriteAt(blk, int64(i)*8192); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	exts, err := Extents(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(exts) != blocks {
		t.Fatalf("%d extents, want %d", len(exts), blocks)
	}
	for i, e := range exts {
		if e.Logical != uint64(i)*8192 || e.Length != 4096 {
			t.Fatalf("extent %d is %+v, want logical %d length 4096", i, e, i*8192)
		}
	}
	if exts[len(exts)-1].Flags&fiemapExtentLast == 0 {
		t.Error("the last extent is not flagged last")
	}
}

func TestStatFileUsesTheKernelsDevEncoding(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	os.WriteFile(p, []byte("x"), 0o644)
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	id, err := StatFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if id.Dev != unix.Major(st.Dev)<<20|unix.Minor(st.Dev) || id.Ino != st.Ino || id.Size != 1 {
		t.Fatalf("%+v for st_dev %#x ino %d", id, st.Dev, st.Ino)
	}
}

func TestDiskStatsListsTheDeviceOfAFile(t *testing.T) {
	testenv.RequireRoot(t)
	p := diskFile(t, 4096)
	id, _ := StatFile(p)
	bd, err := Of(id)
	if err != nil {
		t.Fatal(err)
	}
	st, err := DiskStats(DiskName(bd))
	if err != nil || len(st) != 1 || st[0].Reads == 0 {
		t.Fatalf("diskstats of %s: %v %v", DiskName(bd), st, err)
	}
}

// diskFile writes a file of size bytes on the real disk, left dirty.
func diskFile(t *testing.T, size int) string {
	t.Helper()
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i*7 + i>>12)
	}
	return testenv.DiskFile(t, b)
}

// The lab's kernel has no device mapper, so its stacks are sysfs trees
// written here as the kernel lays them out (a dm or md device lists the
// devices beneath in slaves/; a bound loop device has loop/); a real loop
// device is the recorder's e2e test.
func TestStackOfSaysWhatADiskIsBuiltOn(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string // relative to the disk's sysfs directory
		want  Stack
	}{
		{"a plain disk", map[string]string{"slaves/": "", "size": "100\n"}, Stack{}},
		{"a loop device at an offset of its file", map[string]string{"loop/backing_file": "/srv/disk.img\n", "loop/offset": "1048576\n", "slaves/": ""},
			Stack{Backing: "/srv/disk.img", Offset: 1 << 20}},
		{"an LVM volume on two disks' partitions", map[string]string{"slaves/nvme0n1p3": "", "slaves/sda1": "", "dm/name": "vg-root\n"},
			Stack{Slaves: []string{"nvme0n1p3", "sda1"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dev := kernel.Dev(253, 1)
			sys := filepath.Join(root, kernel.DevString(dev))
			for p, body := range tc.files {
				path := filepath.Join(sys, p)
				if strings.HasSuffix(p, "/") {
					if err := os.MkdirAll(path, 0o755); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			old := sysDevBlock
			sysDevBlock = root
			t.Cleanup(func() { sysDevBlock = old })
			got, err := StackOf(dev)
			if err != nil || got.Backing != tc.want.Backing || got.Offset != tc.want.Offset || !slices.Equal(got.Slaves, tc.want.Slaves) {
				t.Errorf("StackOf = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
