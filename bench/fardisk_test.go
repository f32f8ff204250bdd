package bench

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/internal/pagecache"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/testenv"
)

// The far disk holds a byte-equal copy of the model, answers each read no
// sooner than its latency and many reads at once in about the time of one
// (timed here with O_DIRECT reads of its own, apart from the doctor's
// profile it checks), and leaves nothing behind once undone: no mount, no
// loop device, no FUSE server, no image.
func TestAFarDiskAnswersEachReadLateButManyAtOnceAndIsUndone(t *testing.T) {
	testenv.RequireRoot(t)
	const latency = 2 * time.Millisecond
	t.Setenv(rundir.DiskProfilesEnv, t.TempDir())
	cfg := Config{Iocorr: buildIocorr(t), WorkDir: t.TempDir(), Log: io.Discard}
	// As large as doctor --disk reads over (256 MiB), and random through:
	// mkfs.ext4 -d leaves a block of zeros out of the image, and a hole
	// is read from no disk. Streamed and compared by hash: the test's
	// own peak RSS is every later child's starting maxrss (scale's).
	model := filepath.Join(t.TempDir(), "model.gguf")
	f, err := os.Create(model)
	if err != nil {
		t.Fatal(err)
	}
	want := sha256.New()
	if _, err := io.CopyN(io.MultiWriter(f, want), rand.Reader, 256<<20); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	cp, undo, err := farDisk(cfg, model, latency)
	if err != nil {
		t.Fatal(err)
	}
	undo = undoOnce(t, undo)
	if got, err := fileHash(cp); err != nil || !bytes.Equal(got, want.Sum(nil)) {
		t.Fatalf("the copy differs from the model (%v)", err)
	}
	if _, _, err := pagecache.Evict(cp); err != nil {
		t.Fatal(err)
	}
	const block, reads = 128 << 10, 32
	// Each round its own blocks: a round reading another's would not
	// show a cache the disk should not have.
	one := timeDirectReads(t, cp, 0, block, reads, 1)
	if one < reads*latency {
		t.Errorf("%d reads one at a time took %v, under %v each", reads, one, latency)
	}
	many := timeDirectReads(t, cp, reads*block, block, reads, reads)
	if many > one/3 {
		t.Errorf("%d reads at once took %v, against %v one at a time: the disk does not keep them in flight", reads, many, one)
	}
	t.Logf("%d reads of %d KiB: %v one at a time, %v all at once", reads, block>>10, one, many)

	if err := undo(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cfg.WorkDir, "prefetch", "fardisk")
	if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), dir) {
		t.Errorf("something under %s is still mounted:\n%s", dir, b)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s is still there (%v)", dir, err)
	}
	if out, _ := exec.Command("losetup", "--list", "--noheadings", "--output", "BACK-FILE").Output(); strings.Contains(string(out), dir) {
		t.Errorf("a loop device is still over %s:\n%s", dir, out)
	}
}

// fileHash is the SHA-256 of the file at path.
func fileHash(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

// timeDirectReads reads n blocks of path with O_DIRECT from byte from
// on, at most depth at once, and returns how long they took.
func timeDirectReads(t *testing.T, path string, from int64, block, n, depth int) time.Duration {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	// A buffer per read in flight, page-aligned as O_DIRECT needs.
	bufs := make(chan []byte, depth)
	for range depth {
		buf, err := unix.Mmap(-1, 0, block, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Munmap(buf)
		bufs <- buf
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := time.Now()
	for i := range n {
		buf := <-bufs
		wg.Go(func() {
			defer func() { bufs <- buf }()
			if _, err := unix.Pread(fd, buf, from+int64(i)*int64(block)); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return took
}
