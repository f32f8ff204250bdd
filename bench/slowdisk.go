package bench

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/internal/blockdev"
	"github.com/iocorr/iocorr/internal/cgroup"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/internal/pagecache"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/sweep"
)

// slowDisk puts a copy of model on a disk that serves bps bytes a second
// at any depth: an ext4 file system on a loop device (direct I/O) over a
// file beside the bench's work, whose reads of that file blk-throttle
// holds to bps (cgroup.ThrottleReads). The loop device's requests stay in
// flight while their reads wait, so the trace sees a device that is busy
// and serving what it can: a bandwidth-bound decode on a lab disk that
// is otherwise too fast for one (an edge board's eMMC or a SATA SSD). The
// copy's disk is profiled (iocorr doctor --disk) and the profile checked
// against bps. It returns the copy and what undoes it all, in reverse.
func slowDisk(cfg Config, model string, bps int64) (string, func() error, error) {
	dir := filepath.Join(cfg.WorkDir, "prefetch", "slowdisk")
	img, mnt := filepath.Join(dir, "disk.img"), filepath.Join(dir, "mnt")
	var undo undoStack
	fail := func(err error) (string, func() error, error) {
		return "", nil, errors.Join(fmt.Errorf("slow disk: %w", err), undo.run())
	}
	// What a bench stopped midway left.
	_ = unix.Unmount(mnt, 0)
	detachLoops(img)
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return fail(err)
	}
	fi, err := os.Stat(model)
	if err != nil {
		return fail(err)
	}
	f, err := os.Create(img)
	if err == nil {
		// Room for ext4's own blocks beside the model, in whole MiB (a
		// loop device ignores a last partial sector, and says so).
		const mib = 1 << 20
		err = errors.Join(f.Truncate((fi.Size()+fi.Size()/8+64*mib+mib-1)/mib*mib), f.Close())
	}
	if err != nil {
		return fail(err)
	}
	undo.push(func() error { return os.Remove(img) })
	var stderr strings.Builder
	c := exec.Command("losetup", "--direct-io=on", "--find", "--show", img)
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		return fail(fmt.Errorf("losetup: %w: %s", err, sweep.LastLine([]byte(stderr.String()))))
	}
	dev := strings.TrimSpace(string(out))
	undo.push(func() error { return exec.Command("losetup", "--detach", dev).Run() })
	// Inode tables and journal written now, not by ext4's lazy init after
	// the mount, whose writes would share the throttled disk with the runs.
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", dev).CombinedOutput(); err != nil {
		return fail(fmt.Errorf("mkfs.ext4 %s: %w: %s", dev, err, sweep.LastLine(out)))
	}
	if err := unix.Mount(dev, mnt, "ext4", 0, ""); err != nil {
		return fail(fmt.Errorf("mounting %s on %s: %w", dev, mnt, err))
	}
	undo.push(func() error { return unix.Unmount(mnt, 0) })
	cp := filepath.Join(mnt, filepath.Base(model))
	if err := copyFile(cp, model); err != nil {
		return fail(err)
	}
	backing, err := blockdev.OfFile(img)
	if err != nil {
		return fail(err)
	}
	lift, rule, err := cgroup.ThrottleReads(kernel.DevString(backing.DiskDev), bps)
	if err != nil {
		return fail(err)
	}
	undo.push(lift)
	// Said, so that a bench stopped before it lifts the limit (which holds
	// every read of the machine's disk by this cgroup) says how to.
	logf(cfg, "slow disk: %s on %s (a loop device over %s), its reads held to %d MB/s (rule %s; writing 0 for the limit lifts it)", cp, dev, img, bps/1e6, rule)
	if _, _, err := pagecache.Evict(cp); err != nil {
		return fail(err)
	}
	if out, err := exec.Command(cfg.Iocorr, "doctor", "--disk", cp).CombinedOutput(); err != nil {
		return fail(fmt.Errorf("iocorr doctor --disk: %w: %s", err, sweep.LastLine(out)))
	}
	loop, err := blockdev.OfFile(cp)
	if err != nil {
		return fail(err)
	}
	p, err := rundir.ReadDiskProfile(loop.DiskDev)
	if err == nil && p == nil {
		err = errors.New("doctor --disk kept no profile")
	}
	if err != nil {
		return fail(err)
	}
	// The throttle took: no depth or size read faster than asked (a
	// quarter over for the profile's own timing).
	for _, pt := range p.Points {
		if pt.BytesPerSec > 1.25*float64(bps) {
			return fail(fmt.Errorf("the throttle did not take: %s read %.0f MB/s at depth %d, %d-byte blocks", p.Device, pt.BytesPerSec/1e6, pt.Depth, pt.BlockBytes))
		}
	}
	return cp, undo.run, nil
}

// undoStack is what undoes a set-up, step by step.
type undoStack []func() error

func (u *undoStack) push(f func() error) { *u = append(*u, f) }

// run undoes every step, the last first, and joins their errors.
func (u undoStack) run() error {
	var errs []error
	for i := len(u) - 1; i >= 0; i-- {
		errs = append(errs, u[i]())
	}
	return errors.Join(errs...)
}

// detachLoops detaches every loop device over img.
func detachLoops(img string) {
	out, _ := exec.Command("losetup", "--associated", img).Output()
	for _, line := range strings.Split(string(out), "\n") {
		if dev, _, ok := strings.Cut(line, ":"); ok {
			_ = exec.Command("losetup", "--detach", dev).Run()
		}
	}
}

// copyFile copies src to dst, on its disk when it returns.
func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Sync(), out.Close())
}
