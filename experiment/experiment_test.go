package experiment

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The held child re-executes the test binary; this makes it the shim.
func TestMain(m *testing.M) {
	RunShimIfChild()
	os.Exit(m.Run())
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 && os.Getenv("IOCORR_REQUIRE_BPF") == "" {
		t.Skip("needs root (page cache, cgroups, users); set IOCORR_REQUIRE_BPF=1 to make this a failure")
	}
}

// diskFile writes a file on the real disk (not tmpfs: eviction and FIEMAP
// need a block device underneath).
func diskFile(t *testing.T, size int) string {
	t.Helper()
	dir, err := os.MkdirTemp(".", ".exp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := filepath.Join(dir, "f")
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i * 7)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestEvictEmptiesTheCacheEvenForAFileStillDirty(t *testing.T) {
	requireRoot(t)
	p := diskFile(t, 8<<20) // just written: dirty
	res, pages, err := Residency(p)
	if err != nil {
		t.Fatal(err)
	}
	if res != pages || pages != 2048 {
		t.Fatalf("fresh file: %d of %d pages resident, want all of 2048", res, pages)
	}
	res, pages, err = Evict(p)
	if err != nil {
		t.Fatal(err)
	}
	if res != 0 {
		t.Fatalf("after Evict %d of %d pages stayed resident", res, pages)
	}
}

func TestExtentsCoverTheFileExactly(t *testing.T) {
	requireRoot(t)
	p := diskFile(t, 3<<20+123)
	if _, _, err := Evict(p); err != nil { // forces allocation (delalloc)
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
	if next < 3<<20+123 {
		t.Fatalf("extents end at %d, file is %d", next, 3<<20+123)
	}
	id, err := StatFile(p)
	if err != nil {
		t.Fatal(err)
	}
	bd, err := BlockDeviceOf(id)
	if err != nil {
		t.Fatal(err)
	}
	if bd.DiskDev == 0 || bd.Name == "" {
		t.Fatalf("block device %+v", bd)
	}
	// The extents' physical bytes must lie on the device.
	size, err := readUint("/sys/class/block/" + bd.Name + "/size")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range exts {
		if e.Physical+e.Length > size*512 {
			t.Fatalf("extent %+v past the end of %s (%d sectors)", e, bd.Name, size)
		}
	}
}

func TestMemoryCgroupLimitsAndIsRemoved(t *testing.T) {
	requireRoot(t)
	cg, err := NewMemoryCgroup("iocorr-test-"+strings.ReplaceAll(t.Name(), "/", "-"), 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	limitFile := "memory.max"
	if cg.Version == 1 {
		limitFile = "memory.limit_in_bytes"
	}
	b, err := os.ReadFile(filepath.Join(cg.Path, limitFile))
	if err != nil || strings.TrimSpace(string(b)) != "67108864" {
		t.Fatalf("%s = %q, %v", limitFile, b, err)
	}
	// A process in it that is killed must not keep the cgroup alive.
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := cg.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if c := cg.Counters(); len(c) == 0 {
		t.Error("no cgroup counters")
	}
	if err := cg.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cg.Path); !os.IsNotExist(err) {
		t.Fatalf("cgroup %s still exists", cg.Path)
	}
}

func TestHeldChildRunsOnlyWhenReleased(t *testing.T) {
	requireRoot(t)
	mark := filepath.Join(t.TempDir(), "ran")
	c, err := StartHeld([]string{"sh", "-c", "echo $$ > " + mark}, nil, os.Stdout, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if _, err := os.Stat(mark); err == nil {
		t.Fatal("the child ran before it was released")
	}
	if err := c.Release(); err != nil {
		t.Fatal(err)
	}
	ex := c.Wait()
	if ex.Code != 0 {
		t.Fatalf("exit %+v", ex)
	}
	b, err := os.ReadFile(mark)
	if err != nil {
		t.Fatal(err)
	}
	// The command kept the pid the tracer was given.
	if strings.TrimSpace(string(b)) != strconv.Itoa(c.PID()) {
		t.Fatalf("command ran as pid %s, child pid %d", b, c.PID())
	}
}

func TestExitStatusIsTheChildsAsAShellReportsIt(t *testing.T) {
	requireRoot(t)
	tests := []struct {
		name   string
		argv   []string
		code   int
		signal string
	}{
		{"success", []string{"true"}, 0, ""},
		{"failure code passes through", []string{"sh", "-c", "exit 3"}, 3, ""},
		{"a crash is 128 plus the signal", []string{"sh", "-c", "kill -SEGV $$"}, 128 + int(syscall.SIGSEGV), "SIGSEGV"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := StartHeld(tc.argv, nil, os.Stdout, os.Stderr)
			if err != nil {
				t.Fatal(err)
			}
			c.Release()
			ex := c.Wait()
			if ex.Code != tc.code || ex.Signal != tc.signal {
				t.Fatalf("exit = %d %q, want %d %q", ex.Code, ex.Signal, tc.code, tc.signal)
			}
		})
	}
}

func TestStartHeldRejectsAMissingCommand(t *testing.T) {
	if _, err := StartHeld([]string{"no-such-command-iocorr"}, nil, os.Stdout, os.Stderr); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("err = %v", err)
	}
}

func TestChildRunsAsTheGivenUser(t *testing.T) {
	requireRoot(t)
	u, err := LookupUser("nobody")
	if err != nil {
		t.Skip("no user nobody on this machine")
	}
	dir, err := os.MkdirTemp("", "iocorr-user")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o777) // writable by nobody
	out := filepath.Join(dir, "id")
	c, err := StartHeld([]string{"sh", "-c", "id -u > " + out}, u, os.Stdout, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	c.Release()
	if ex := c.Wait(); ex.Code != 0 {
		t.Fatalf("exit %+v", ex)
	}
	b, _ := os.ReadFile(out)
	if strings.TrimSpace(string(b)) != strconv.Itoa(int(u.UID)) {
		t.Fatalf("ran as uid %q, want %d", b, u.UID)
	}
}

func TestForwardedInterruptStopsTheChild(t *testing.T) {
	requireRoot(t)
	c, err := StartHeld([]string{"sleep", "30"}, nil, os.Stdout, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	c.Release()
	stop := c.ForwardSignals()
	time.Sleep(100 * time.Millisecond)
	syscall.Kill(os.Getpid(), syscall.SIGINT)
	if !c.WaitTimeout(5 * time.Second) {
		c.Abort()
		t.Fatal("SIGINT was not forwarded")
	}
	if n := stop(); n != 1 {
		t.Errorf("forwarded %d signals, want 1", n)
	}
	if ex := c.Wait(); ex.Code != 128+int(syscall.SIGINT) {
		t.Fatalf("exit %+v, want killed by SIGINT", ex)
	}
}

func TestDiskStatsListsTheDeviceOfAFile(t *testing.T) {
	requireRoot(t)
	p := diskFile(t, 4096)
	id, _ := StatFile(p)
	bd, err := BlockDeviceOf(id)
	if err != nil {
		t.Fatal(err)
	}
	st, err := DiskStats(DiskName(bd))
	if err != nil || len(st) != 1 {
		t.Fatalf("diskstats of %s: %v %v", DiskName(bd), st, err)
	}
}
