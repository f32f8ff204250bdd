package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"bazil.org/fuse"
	"bazil.org/fuse/fs"
	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/internal/blockdev"
	"github.com/iocorr/iocorr/internal/pagecache"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/sweep"
)

// farDisk puts a copy of model on a disk whose every read takes latency
// more than the machine's page cache needs to serve it, however many are
// in flight: a network block volume, or an SD card, where one read at a
// time gets a tenth of what the device serves at depth. Every lab disk
// answers a read in some 100 µs, and the read-around of a fault is a few
// MiB, so no decode here waits on one fault at a time for long; on this
// disk it does, and a prefetch that keeps reads in flight is what pays.
//
// The copy lives in an ext4 image (mkfs.ext4 -d) that a FUSE file system
// of the bench's own serves: each read is answered latency after it
// arrives, from the image in the machine's page cache. A read-only loop
// device in direct-I/O mode sits over that file, so its requests are the
// block requests the trace sees and the kernel's asynchronous direct I/O
// into FUSE keeps as many in flight as the loop device is given (device
// mapper's delay target and null_blk would do the same, and this
// kernel has neither). The disk is profiled (iocorr doctor --disk) and
// the profile checked: a read at depth 1 takes at least latency, and
// depth serves several times what depth 1 does. It returns the copy and
// what undoes it all, in reverse.
func farDisk(cfg Config, model string, latency time.Duration) (string, func() error, error) {
	dir := filepath.Join(cfg.WorkDir, "prefetch", "fardisk")
	src, img, served, mnt := filepath.Join(dir, "src"), filepath.Join(dir, "disk.img"), filepath.Join(dir, "served"), filepath.Join(dir, "mnt")
	var undo undoStack
	fail := func(err error) (string, func() error, error) {
		return "", nil, errors.Join(fmt.Errorf("far disk: %w", err), undo.run())
	}
	// What a bench stopped midway left.
	_ = unix.Unmount(mnt, 0)
	detachLoops(filepath.Join(served, farImage))
	_ = unix.Unmount(served, unix.MNT_DETACH)
	if err := os.RemoveAll(dir); err != nil {
		return fail(err)
	}
	for _, d := range []string{src, served, mnt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fail(err)
		}
	}
	undo.push(func() error { return os.RemoveAll(dir) })
	fi, err := os.Stat(model)
	if err != nil {
		return fail(err)
	}
	// mkfs.ext4 -d copies a folder: the model joins it as a link where
	// it can, not a second copy.
	if into := filepath.Join(src, filepath.Base(model)); os.Link(model, into) != nil {
		if err := copyFile(into, model); err != nil {
			return fail(err)
		}
	}
	const mib = 1 << 20
	imgMiB := (fi.Size()+fi.Size()/8+64*mib)/mib + 1
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", "-d", src, img, fmt.Sprintf("%dM", imgMiB)).CombinedOutput(); err != nil {
		return fail(fmt.Errorf("mkfs.ext4 -d %s: %w: %s", src, err, sweep.LastLine(out)))
	}
	if err := os.RemoveAll(src); err != nil {
		return fail(err)
	}
	// Into the machine's page cache, where the server reads it from: the
	// far disk's time is then its latency, not the machine disk's too.
	if err := warm(img); err != nil {
		return fail(err)
	}
	stop, err := serveDelayed(img, served, latency)
	if err != nil {
		return fail(err)
	}
	undo.push(stop)
	var stderr strings.Builder
	c := exec.Command("losetup", "--read-only", "--direct-io=on", "--find", "--show", filepath.Join(served, farImage))
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		return fail(fmt.Errorf("losetup: %w: %s", err, sweep.LastLine([]byte(stderr.String()))))
	}
	dev := strings.TrimSpace(string(out))
	undo.push(func() error { return exec.Command("losetup", "--detach", dev).Run() })
	// A loop device falls back to buffered reads, one at a time, where
	// its file refuses direct I/O: then it is not the disk asked for.
	if out, err := exec.Command("losetup", "--list", "--noheadings", "--output", "DIO", dev).Output(); err != nil || strings.TrimSpace(string(out)) != "1" {
		return fail(fmt.Errorf("%s does not read its file with direct I/O (losetup says %q, %v)", dev, strings.TrimSpace(string(out)), err))
	}
	// noload: a read-only device has no journal to replay.
	if err := unix.Mount(dev, mnt, "ext4", unix.MS_RDONLY, "noload"); err != nil {
		return fail(fmt.Errorf("mounting %s on %s: %w", dev, mnt, err))
	}
	undo.push(func() error { return unix.Unmount(mnt, 0) })
	cp := filepath.Join(mnt, filepath.Base(model))
	logf(cfg, "far disk: %s on %s (a loop device over %s, every read of which FUSE answers %v late)", cp, dev, img, latency)
	if _, _, err := pagecache.Evict(cp); err != nil {
		return fail(err)
	}
	if out, err := exec.Command(cfg.Iocorr, "doctor", "--disk", cp).CombinedOutput(); err != nil {
		return fail(fmt.Errorf("iocorr doctor --disk: %w: %s", err, sweep.LastLine(out)))
	}
	if err := checkFar(cp, latency); err != nil {
		return fail(err)
	}
	return cp, undo.run, nil
}

const (
	// farImage is the one file the far disk's FUSE file system serves.
	farImage = "disk.img"
	// farDepth is the most reads it has in flight: as many as doctor
	// --disk asks for, and twice that.
	farDepth = 64
)

// checkFar holds the far disk's profile to what it was made to be.
func checkFar(cp string, latency time.Duration) error {
	bd, err := blockdev.OfFile(cp)
	if err != nil {
		return err
	}
	p, err := rundir.ReadDiskProfile(bd.DiskDev)
	if err == nil && p == nil {
		err = errors.New("doctor --disk kept no profile")
	}
	if err != nil {
		return err
	}
	// Depth 1 against the best depth at the smallest read size, one FUSE
	// request a read: a larger read is cut into several that are answered
	// together, so that depth gains it less (1 MiB: 4.3 times on the lab's
	// VM, 128 KiB: 19).
	var one *rundir.DiskPoint
	best := 0.0
	for i, pt := range p.Points {
		if pt.Depth == 1 && (one == nil || pt.BlockBytes < one.BlockBytes) {
			one = &p.Points[i]
		}
	}
	if one == nil {
		return fmt.Errorf("the profile of %s has no point at depth 1", p.Device)
	}
	for _, pt := range p.Points {
		if pt.BlockBytes == one.BlockBytes {
			best = max(best, pt.BytesPerSec)
		}
	}
	if time.Duration(one.MeanLatencyNs) < latency {
		return fmt.Errorf("%s answered %d-byte reads at depth 1 in %v, under the %v it was made to take", p.Device, one.BlockBytes, time.Duration(one.MeanLatencyNs), latency)
	}
	if best < 3*one.BytesPerSec {
		return fmt.Errorf("%s serves %d-byte reads at depth no faster than at depth 1 (%.0f against %.0f MB/s): its reads are not kept in flight", p.Device, one.BlockBytes, best/1e6, one.BytesPerSec/1e6)
	}
	return nil
}

// serveDelayed mounts at dir a read-only FUSE file system of one file,
// farImage, whose reads are img's, each answered latency after it
// arrives. FUSE's asynchronous direct I/O (bazil.org/fuse asks for it)
// sends a direct read's pieces at once, and the server answers each on
// its own goroutine: reads in flight wait out their latency together.
// It returns what unmounts it and waits for the server to end.
func serveDelayed(img, dir string, latency time.Duration) (func() error, error) {
	f, err := os.Open(img)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, errors.Join(err, f.Close())
	}
	// The kernel holds a FUSE mount's asynchronous requests to 12 in
	// flight unless told otherwise: the disk would be one of depth 12.
	conn, err := fuse.Mount(dir, fuse.ReadOnly(), fuse.FSName("iocorr-fardisk"), fuse.Subtype("iocorr-fardisk"),
		fuse.MaxBackground(farDepth), fuse.CongestionThreshold(farDepth*3/4))
	if err != nil {
		return nil, errors.Join(fmt.Errorf("mounting FUSE on %s: %w", dir, err), f.Close())
	}
	served := make(chan error, 1)
	go func() { served <- fs.Serve(conn, delayedFS{delayedFile{f, fi.Size(), latency}}) }()
	return func() error {
		err := unix.Unmount(dir, 0)
		if err != nil {
			err = fmt.Errorf("unmounting %s: %w", dir, err)
			_ = unix.Unmount(dir, unix.MNT_DETACH)
		}
		return errors.Join(err, <-served, conn.Close(), f.Close())
	}, nil
}

type delayedFS struct{ file delayedFile }

func (d delayedFS) Root() (fs.Node, error) { return delayedDir(d), nil }

type delayedDir struct{ file delayedFile }

func (delayedDir) Attr(_ context.Context, a *fuse.Attr) error {
	a.Inode, a.Mode = 1, os.ModeDir|0o555
	return nil
}

func (d delayedDir) Lookup(_ context.Context, name string) (fs.Node, error) {
	if name != farImage {
		return nil, syscall.ENOENT
	}
	return d.file, nil
}

type delayedFile struct {
	f       *os.File
	size    int64
	latency time.Duration
}

func (d delayedFile) Attr(_ context.Context, a *fuse.Attr) error {
	a.Inode, a.Mode, a.Size = 2, 0o444, uint64(d.size)
	return nil
}

// Open keeps the file out of the page cache of the FUSE mount: every read
// of the loop device is one to the server.
func (d delayedFile) Open(_ context.Context, _ *fuse.OpenRequest, resp *fuse.OpenResponse) (fs.Handle, error) {
	resp.Flags |= fuse.OpenDirectIO
	return d, nil
}

func (d delayedFile) Read(ctx context.Context, req *fuse.ReadRequest, resp *fuse.ReadResponse) error {
	t := time.NewTimer(d.latency)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return syscall.EINTR
	}
	buf := make([]byte, req.Size)
	n, err := d.f.ReadAt(buf, req.Offset)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	resp.Data = buf[:n]
	return err
}
