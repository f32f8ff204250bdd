package cgroup

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iocorr/iocorr/internal/launch"
	"github.com/iocorr/iocorr/internal/pagecache"
	"github.com/iocorr/iocorr/testkit/testenv"
)

func TestMemoryCgroupHoldsTheChildFromItsFirstInstructionAndIsRemoved(t *testing.T) {
	testenv.RequireRoot(t)
	tests := []struct {
		name string
		// argv's output is checked by check; it may leave a process behind.
		argv  []string
		kill  bool
		check func(t *testing.T, out string, cg *Cgroup)
	}{
		{
			name: "the command starts inside the cgroup",
			argv: []string{"cat", "/proc/self/cgroup"},
			check: func(t *testing.T, out string, cg *Cgroup) {
				ok := false
				for _, line := range strings.Split(out, "\n") {
					f := strings.SplitN(line, ":", 3)
					if len(f) == 3 && strings.HasSuffix(cg.Path, f[2]) && filepath.Base(f[2]) == filepath.Base(cg.Path) &&
						(cg.Version == 2 && f[0] == "0" || hasWord(strings.ReplaceAll(f[1], ",", " "), "memory")) {
						ok = true
					}
				}
				if !ok {
					t.Fatalf("the command's first read of /proc/self/cgroup shows no %s:\n%s", cg.Path, out)
				}
			},
		},
		{
			name: "a killed command does not keep it alive",
			argv: []string{"sleep", "30"},
			kill: true,
		},
		{
			name: "a process the command left behind does not keep it alive",
			argv: []string{"sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!"},
		},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cg, err := NewMemory(fmt.Sprintf("iocorr-test-%d-%d", os.Getpid(), i), 64<<20)
			if err != nil {
				t.Fatal(err)
			}
			limitFile := map[int]string{1: "memory.limit_in_bytes", 2: "memory.max"}[cg.Version]
			if b, err := os.ReadFile(filepath.Join(cg.Path, limitFile)); err != nil || strings.TrimSpace(string(b)) != "67108864" {
				t.Fatalf("%s = %q, %v", limitFile, b, err)
			}
			var out bytes.Buffer
			c, err := launch.StartHeld(tc.argv, nil, &out, os.Stderr, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := cg.Add(c.PID()); err != nil {
				c.Abort()
				t.Fatal(err)
			}
			c.Release()
			if tc.kill {
				time.Sleep(50 * time.Millisecond)
				c.Signal(syscall.SIGKILL)
			}
			c.Wait()
			if tc.check != nil {
				tc.check(t, out.String(), cg)
			}
			if len(cg.Counters()) == 0 {
				t.Error("no cgroup counters")
			}
			if err := cg.Remove(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(cg.Path); !os.IsNotExist(err) {
				t.Fatalf("cgroup %s still exists", cg.Path)
			}
			if pid, err := strconv.Atoi(strings.TrimSpace(out.String())); err == nil {
				syscall.Kill(pid, syscall.SIGKILL) // the process left behind
			}
		})
	}
}

func TestMemoryCgroupLimitsThePageCacheOfWhatTheCommandReads(t *testing.T) {
	testenv.RequireRoot(t)
	const limit = 32 << 20
	p := testenv.DiskFile(t, make([]byte, 96<<20))
	if _, _, err := pagecache.Evict(p); err != nil {
		t.Fatal(err)
	}
	cg, err := NewMemory(fmt.Sprintf("iocorr-test-%d-cache", os.Getpid()), limit)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Remove()
	c, err := launch.StartHeld([]string{"cat", p}, nil, io.Discard, os.Stderr, nil)
	if err != nil {
		t.Fatal(err)
	}
	cg.Add(c.PID())
	c.Release()
	if ex := c.Wait(); ex.Code != 0 {
		t.Fatalf("cat: %+v", ex)
	}
	res, pages, _ := pagecache.Residency(p)
	ctr := cg.Counters()
	peak := ctr["memory.max_usage_in_bytes"] + ctr["memory.peak"]
	if peak == 0 || peak > limit || res*4096 > limit {
		t.Fatalf("peak %d, %d of %d pages resident after reading under a %d-byte limit; counters %v", peak, res, pages, limit, ctr)
	}
	t.Logf("96 MiB read under a 32 MiB limit: peak %d bytes, %d of %d pages left resident; counters %v", peak, res, pages, ctr)
}

// There is no cgroup v2 memory controller on this test machine (memory is
// bound to the v1 hierarchy, and moving it would disturb everything else),
// so the v2 files are a directory that looks like one. It checks which
// version is chosen, where the cgroup goes and what is written and read,
// not the kernel.
func TestMemoryCgroupPrefersV2WhenItHasTheMemoryController(t *testing.T) {
	tests := []struct {
		name, own, wantParent string
	}{
		{"iocorr in the root cgroup", "/", ""},
		{"iocorr in a job's cgroup: beside it, under the same limits", "/ci/job1", "ci"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpuset cpu io memory pids\n"), 0o644)
			os.MkdirAll(filepath.Join(root, tc.own), 0o755)
			self := filepath.Join(t.TempDir(), "cgroup")
			os.WriteFile(self, []byte("0::"+tc.own+"\n"), 0o644)
			defer func(v2 []string, v1, pc string) { cgroupV2Roots, cgroupV1Root, procCgroup = v2, v1, pc }(cgroupV2Roots, cgroupV1Root, procCgroup)
			cgroupV2Roots, cgroupV1Root, procCgroup = []string{filepath.Join(root, "absent"), root}, filepath.Join(root, "no-v1"), self

			cg, err := NewMemory("iocorr-1", 256<<20)
			if err != nil {
				t.Fatal(err)
			}
			if cg.Version != 2 || cg.Path != filepath.Join(root, tc.wantParent, "iocorr-1") {
				t.Fatalf("cgroup %+v, want v2 at %s", cg, filepath.Join(root, tc.wantParent, "iocorr-1"))
			}
			for file, want := range map[string]string{"memory.max": "268435456", "memory.swap.max": "0", "../cgroup.subtree_control": "+memory"} {
				if b, _ := os.ReadFile(filepath.Join(cg.Path, file)); string(b) != want {
					t.Errorf("%s = %q, want %q", file, b, want)
				}
			}
			os.WriteFile(filepath.Join(cg.Path, "memory.events"), []byte("low 0\nhigh 0\nmax 17\noom 1\noom_kill 1\n"), 0o644)
			os.WriteFile(filepath.Join(cg.Path, "memory.peak"), []byte("268431360\n"), 0o644)
			os.WriteFile(filepath.Join(cg.Path, "memory.stat"), []byte("anon 1000\nfile 2000\npgfault 7\npgmajfault 3\nshmem 0\n"), 0o644)
			got := cg.Counters()
			for k, v := range map[string]uint64{"memory.events.max": 17, "memory.events.oom_kill": 1, "memory.peak": 268431360, "memory.stat.pgmajfault": 3, "memory.stat.file": 2000} {
				if got[k] != v {
					t.Errorf("counter %s = %d, want %d (all: %v)", k, got[k], v, got)
				}
			}
			if _, ok := got["memory.stat.shmem"]; ok {
				t.Error("counters hold memory.stat keys nobody asked for")
			}
		})
	}
}

func TestMemoryCgroupV1IsMadeInsideIocorrsOwnCgroup(t *testing.T) {
	testenv.RequireRoot(t)
	own := ownCgroup("memory")
	cg, err := NewMemory(fmt.Sprintf("iocorr-test-%d-nest", os.Getpid()), 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Remove()
	if cg.Version == 1 && filepath.Dir(cg.Path) != filepath.Join(cgroupV1Root, own) {
		t.Fatalf("v1 cgroup at %s, iocorr is in %s", cg.Path, own)
	}
}

func TestNewMemoryRemovesOnesLeftByADeadRun(t *testing.T) {
	testenv.RequireRoot(t)
	// A pid that is certainly gone: a child that exited.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	deadPID := cmd.Process.Pid
	probe, err := NewMemory(fmt.Sprintf("iocorr-test-%d-probe", os.Getpid()), 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(probe.Path)
	probe.Remove()
	stale := filepath.Join(root, Name(deadPID))
	live := filepath.Join(root, Name(os.Getpid())) // its process is alive: in use
	for _, d := range []string{stale, live} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	defer os.Remove(live)
	defer os.Remove(stale)
	cg, err := NewMemory(fmt.Sprintf("iocorr-test-%d-new", os.Getpid()), 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Remove()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale cgroup %s of dead pid %d is still there", stale, deadPID)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("cgroup %s of a live process was removed", live)
	}
}

// The held child re-executes the test binary; this makes it the shim.
func TestMain(m *testing.M) {
	launch.RunShimIfChild()
	os.Exit(m.Run())
}
