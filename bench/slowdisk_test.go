package bench

import (
	"bytes"
	"crypto/rand"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/iocorr/iocorr/internal/blockdev"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/internal/pagecache"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/testenv"
)

// The slow disk holds a byte-equal copy of the model, serves it at the
// bandwidth asked, not the machine disk's (timed here with O_DIRECT reads
// of its own, apart from the doctor's profile it checks), and leaves
// nothing behind once undone: no mount, no loop device, no limit on the
// machine's disk, no image.
func TestASlowDiskServesTheModelAtItsBandwidthAndIsUndone(t *testing.T) {
	testenv.RequireRoot(t)
	const bps = 200e6
	t.Setenv(rundir.DiskProfilesEnv, t.TempDir())
	cfg := Config{Iocorr: buildIocorr(t), WorkDir: t.TempDir(), Log: io.Discard}
	// As large as doctor --disk reads over (256 MiB), its head random and
	// the rest a hole, which the copy writes out.
	model := filepath.Join(t.TempDir(), "model.gguf")
	want := make([]byte, 256<<20)
	rand.Read(want[:4<<20])
	if err := os.WriteFile(model, want[:4<<20], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(model, int64(len(want))); err != nil {
		t.Fatal(err)
	}
	backing, err := blockdev.OfFile(cfg.WorkDir)
	if err != nil {
		t.Fatal(err)
	}

	cp, undo, err := slowDisk(cfg, model, bps)
	if err != nil {
		t.Fatal(err)
	}
	undo = undoOnce(t, undo)
	got, err := os.ReadFile(cp)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the copy differs from the model (%v)", err)
	}
	if _, _, err := pagecache.Evict(cp); err != nil {
		t.Fatal(err)
	}
	// A sustained read, the rate the bench's runs get: 24 MiB measured
	// 1.9 GB/s once while other packages' tests read the same disk, a
	// cause not found (blk-throttle lets a slice's worth through at once,
	// but its slice is 20 ms on a non-rotational disk: 4 MB).
	rate := directReadRate(t, cp, 160<<20)
	// Unthrottled, this VM's disk serves 1 MiB reads at about 3 GB/s.
	if rate > 1.3*bps || rate < 0.3*bps {
		t.Errorf("the slow disk served %.0f MB/s, want about %.0f", rate/1e6, bps/1e6)
	}
	t.Logf("the slow disk served %.0f MB/s at one 1 MiB read in flight", rate/1e6)

	if err := undo(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), filepath.Dir(cp)) {
		t.Errorf("%s is still mounted", filepath.Dir(cp))
	}
	img := filepath.Join(cfg.WorkDir, "prefetch", "slowdisk", "disk.img")
	if _, err := os.Stat(img); !os.IsNotExist(err) {
		t.Errorf("the image %s is still there (%v)", img, err)
	}
	if out, _ := exec.Command("losetup", "--list", "--noheadings", "--output", "BACK-FILE").Output(); strings.Contains(string(out), img) {
		t.Errorf("a loop device is still over %s:\n%s", img, out)
	}
	if b, _ := os.ReadFile("/sys/fs/cgroup/blkio/blkio.throttle.read_bps_device"); strings.Contains(string(b), kernel.DevString(backing.DiskDev)+" ") {
		t.Errorf("the machine's disk is still throttled: %s", b)
	}
}

// undoOnce runs undo when the test ends, unless the test ran what it
// returns first.
func undoOnce(t *testing.T, undo func() error) func() error {
	once := sync.OnceValue(undo)
	t.Cleanup(func() { once() })
	return once
}

// directReadRate reads n bytes of path with O_DIRECT, 1 MiB at a time,
// and returns the bytes a second.
func directReadRate(t *testing.T, path string, n int) float64 {
	t.Helper()
	const block = 1 << 20
	return float64(n) / timeDirectReads(t, path, 0, block, n/block, 1).Seconds()
}
