package experiment

import (
	"bufio"
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
	"unsafe"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/bpf"
)

// The held child re-executes the test binary; this makes it the shim.
// ttyHelperEnv turns the test binary into a small `record` stand-in that
// a test runs on a pseudo-terminal of its own.
func TestMain(m *testing.M) {
	RunShimIfChild()
	switch os.Getenv(ttyHelperEnv) {
	case "":
	case "orphan":
		os.Exit(orphanHelper())
	default:
		os.Exit(ttyHelper())
	}
	os.Exit(m.Run())
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 && os.Getenv("IOCORR_REQUIRE_BPF") == "" {
		t.Skip("needs root (page cache, cgroups, users); set IOCORR_REQUIRE_BPF=1 to make this a failure")
	}
}

// diskFile writes a file on the real disk (not tmpfs: eviction and FIEMAP
// need a block device underneath). The file is left dirty.
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
		b[i] = byte(i*7 + i>>12)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestEvictEmptiesTheCacheOfOneFile(t *testing.T) {
	requireRoot(t)
	tests := []struct {
		name    string
		prepare func(t *testing.T, p string) // leaves the file fully resident
	}{
		{"a file just written, still dirty", func(t *testing.T, p string) {}},
		{"a clean file read back into the cache", func(t *testing.T, p string) {
			if _, _, err := Evict(p); err != nil {
				t.Fatal(err)
			}
			if _, err := os.ReadFile(p); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := diskFile(t, 8<<20)
			other := diskFile(t, 1<<20)
			tc.prepare(t, p)
			res, pages, err := Residency(p)
			if err != nil {
				t.Fatal(err)
			}
			if res != pages || pages != 2048 {
				t.Fatalf("before: %d of %d pages resident, want all of 2048", res, pages)
			}
			res, pages, err = Evict(p)
			if err != nil {
				t.Fatal(err)
			}
			if res != 0 {
				t.Fatalf("after Evict %d of %d pages stayed resident", res, pages)
			}
			if res, _, _ := Residency(p); res != 0 {
				t.Fatalf("mincore after Evict: %d pages resident", res)
			}
			// Only the given file: another one stays cached.
			if res, pages, _ := Residency(other); res != pages {
				t.Fatalf("another file lost %d of its %d pages", pages-res, pages)
			}
		})
	}
}

// sink keeps the compiler from dropping loads made only to fault pages in.
var sink byte

func TestEvictReportsPagesAMappingKeepsResident(t *testing.T) {
	requireRoot(t)
	p := diskFile(t, 1<<20)
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, 1<<20, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	for i := 0; i < len(mem); i += 4096 {
		sink += mem[i]
	}
	res, pages, err := Evict(p)
	if err != nil {
		t.Fatal(err)
	}
	// FADV_DONTNEED does not unmap pages from page tables: a process that
	// has the model mapped keeps it cached, and Evict must say so.
	if real, _, _ := Residency(p); res != real || res == 0 {
		t.Fatalf("Evict reported %d of %d resident, mincore says %d; want the mapped pages reported", res, pages, real)
	}
	t.Logf("%d of %d pages stayed resident while mapped", res, pages)
}

func TestExtentsCoverTheFileAndTheDiskReadsTheirSectors(t *testing.T) {
	requireRoot(t)
	const size = 3<<20 + 123
	p := diskFile(t, size)
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
	if next < size {
		t.Fatalf("extents end at %d, file is %d", next, size)
	}
	id, err := StatFile(p)
	if err != nil {
		t.Fatal(err)
	}
	bd, err := BlockDeviceOf(id)
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
	// else was read.
	tr, err := bpf.Open(bpf.Options{RingBufBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
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
		if len(rec.RawSample) < int(unsafe.Sizeof(bpf.IocorrBlockEvent{})) {
			continue
		}
		e := (*bpf.IocorrBlockEvent)(unsafe.Pointer(&rec.RawSample[0]))
		if e.Hdr.Type == uint16(bpf.IocorrEventTypeEV_BLOCK) && e.Dev == bd.DiskDev && e.CmdFlags&0xff == 0 {
			reads = append(reads, [2]uint64{e.Sector * 512, e.Sector*512 + uint64(e.Bytes)})
		}
	}
	for _, e := range exts {
		n := min(e.Length, (size-e.Logical+4095)&^4095) // the file's pages in this extent
		from := bd.PartStartSector*512 + e.Physical
		for off := from; off < from+n; off += 4096 {
			covered := false
			for _, r := range reads {
				covered = covered || r[0] <= off && off+4096 <= r[1]
			}
			if !covered {
				t.Fatalf("file byte %d (disk sector %d) was not read by any of %d block reads of %s", e.Logical+off-from, off/512, len(reads), bd.Name)
			}
		}
	}
	t.Logf("%d extents on %s (partition start %d, disk %d:%d), covered by %d block reads", len(exts), bd.Name, bd.PartStartSector, bd.DiskDev>>20, bd.DiskDev&0xfffff, len(reads))
}

func TestExtentsListsEveryExtentOfAFragmentedFile(t *testing.T) {
	requireRoot(t)
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

func TestMemoryCgroupHoldsTheChildFromItsFirstInstructionAndIsRemoved(t *testing.T) {
	requireRoot(t)
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
			cg, err := NewMemoryCgroup(fmt.Sprintf("iocorr-test-%d-%d", os.Getpid(), i), 64<<20)
			if err != nil {
				t.Fatal(err)
			}
			limitFile := map[int]string{1: "memory.limit_in_bytes", 2: "memory.max"}[cg.Version]
			if b, err := os.ReadFile(filepath.Join(cg.Path, limitFile)); err != nil || strings.TrimSpace(string(b)) != "67108864" {
				t.Fatalf("%s = %q, %v", limitFile, b, err)
			}
			var out bytes.Buffer
			c, err := StartHeld(tc.argv, nil, &out, os.Stderr)
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
	requireRoot(t)
	const limit = 32 << 20
	p := diskFile(t, 96<<20)
	if _, _, err := Evict(p); err != nil {
		t.Fatal(err)
	}
	cg, err := NewMemoryCgroup(fmt.Sprintf("iocorr-test-%d-cache", os.Getpid()), limit)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Remove()
	c, err := StartHeld([]string{"cat", p}, nil, io.Discard, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	cg.Add(c.PID())
	c.Release()
	if ex := c.Wait(); ex.Code != 0 {
		t.Fatalf("cat: %+v", ex)
	}
	res, pages, _ := Residency(p)
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

			cg, err := NewMemoryCgroup("iocorr-1", 256<<20)
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
	requireRoot(t)
	own := ownCgroup("memory")
	cg, err := NewMemoryCgroup(fmt.Sprintf("iocorr-test-%d-nest", os.Getpid()), 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Remove()
	if cg.Version == 1 && filepath.Dir(cg.Path) != filepath.Join(cgroupV1Root, own) {
		t.Fatalf("v1 cgroup at %s, iocorr is in %s", cg.Path, own)
	}
}

func TestNewMemoryCgroupRemovesOnesLeftByADeadRun(t *testing.T) {
	requireRoot(t)
	// A pid that is certainly gone: a child that exited.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	deadPID := cmd.Process.Pid
	probe, err := NewMemoryCgroup(fmt.Sprintf("iocorr-test-%d-probe", os.Getpid()), 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(probe.Path)
	probe.Remove()
	stale := filepath.Join(root, CgroupName(deadPID))
	live := filepath.Join(root, CgroupName(os.Getpid())) // its process is alive: in use
	for _, d := range []string{stale, live} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	defer os.Remove(live)
	defer os.Remove(stale)
	cg, err := NewMemoryCgroup(fmt.Sprintf("iocorr-test-%d-new", os.Getpid()), 16<<20)
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

func TestAbortedChildNeverRunsTheCommand(t *testing.T) {
	requireRoot(t)
	mark := filepath.Join(t.TempDir(), "ran")
	c, err := StartHeld([]string{"touch", mark}, nil, os.Stdout, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	c.Abort()
	if _, err := os.Stat(mark); err == nil {
		t.Fatal("an aborted child ran the command")
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
		{"a command that cannot run is 126", []string{"sh", "-c", "exec /dev/null"}, 126, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := StartHeld(tc.argv, nil, io.Discard, io.Discard)
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

func TestChildRusageCountsItsFaultsAndIO(t *testing.T) {
	requireRoot(t)
	p := diskFile(t, 16<<20)
	if _, _, err := Evict(p); err != nil {
		t.Fatal(err)
	}
	c, err := StartHeld([]string{"dd", "if=" + p, "of=/dev/null", "bs=1M", "iflag=direct"}, nil, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c.Release()
	ex := c.Wait()
	ru := ex.Rusage
	// 16 MiB read is 32768 sectors of 512 bytes.
	if ex.Code != 0 || ru.Inblock < 32768 || ru.Minflt == 0 || ru.Maxrss == 0 {
		t.Fatalf("exit %d, rusage inblock %d minflt %d maxrss %d", ex.Code, ru.Inblock, ru.Minflt, ru.Maxrss)
	}
}

func TestStartHeldRejectsAMissingCommand(t *testing.T) {
	if _, err := StartHeld([]string{"no-such-command-iocorr"}, nil, os.Stdout, os.Stderr); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("err = %v", err)
	}
}

func TestChildRunsAsTheGivenUserWithTheirGroupsAndHome(t *testing.T) {
	requireRoot(t)
	u, err := LookupUser("nobody")
	if err != nil {
		t.Fatalf("no user nobody on this machine: %v", err)
	}
	dir, err := os.MkdirTemp("", "iocorr-user")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o777) // writable by nobody
	out := filepath.Join(dir, "id")
	c, err := StartHeld([]string{"sh", "-c", `echo "$(id -u) $(id -g) $(id -G) $HOME $USER" > ` + out}, u, os.Stdout, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	c.Release()
	if ex := c.Wait(); ex.Code != 0 {
		t.Fatalf("exit %+v", ex)
	}
	b, _ := os.ReadFile(out)
	want := fmt.Sprintf("%d %d %d", u.UID, u.GID, u.GID)
	for _, g := range u.Groups {
		want += fmt.Sprintf(" %d", g)
	}
	want += " " + u.Home + " nobody"
	if strings.TrimSpace(string(b)) != want {
		t.Fatalf("ran as %q, want %q", strings.TrimSpace(string(b)), want)
	}
	// The file it wrote is its own.
	var st unix.Stat_t
	unix.Stat(out, &st)
	if st.Uid != u.UID {
		t.Fatalf("file written by the command belongs to uid %d", st.Uid)
	}
}

func TestSudoUserIsTheInvokingUser(t *testing.T) {
	requireRoot(t)
	tests := []struct {
		name, uid, gid string
		want           *User
	}{
		{"not under sudo", "", "", nil},
		{"root ran sudo", "0", "0", nil},
		{"a user ran sudo", "65534", "65534", &User{UID: 65534, GID: 65534, Name: "nobody", Home: "/nonexistent"}},
		{"a uid without a passwd entry", "54321", "54321", &User{UID: 54321, GID: 54321}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SUDO_UID", tc.uid)
			t.Setenv("SUDO_GID", tc.gid)
			u, err := SudoUser()
			if err != nil {
				t.Fatal(err)
			}
			if (u == nil) != (tc.want == nil) || u != nil && (u.UID != tc.want.UID || u.GID != tc.want.GID || u.Name != tc.want.Name || u.Home != tc.want.Home) {
				t.Fatalf("SudoUser() = %+v, want %+v", u, tc.want)
			}
		})
	}
}

const ttyHelperEnv = "IOCORR_TEST_TTY_HELPER"

// ttyHelper runs `sleep 30` held and released as record does, forwarding
// signals, and reports "received forwarded exit-code" on stdout.
func ttyHelper() int {
	c, err := StartHeld([]string{"sleep", "30"}, nil, io.Discard, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	stop := c.ForwardSignals()
	c.Release()
	fmt.Println("ready")
	c.WaitTimeout(10 * time.Second)
	c.Signal(syscall.SIGKILL) // not interrupted: the check fails below
	n := stop()
	fmt.Println(n.Received, n.Forwarded, c.Wait().Code)
	return 0
}

// orphanHelper starts `sleep 30` (as nobody when IOCORR_TEST_USER is
// set), prints its pid and waits to be killed.
func orphanHelper() int {
	var u *User
	if os.Getenv("IOCORR_TEST_USER") != "" {
		var err error
		if u, err = LookupUser(os.Getenv("IOCORR_TEST_USER")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	c, err := StartHeld([]string{"sleep", "30"}, u, io.Discard, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c.Release()
	for i := 0; i < 500; i++ { // until the shim has exec'd the command
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", c.PID())); strings.TrimSpace(string(b)) == "sleep" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println(c.PID())
	time.Sleep(30 * time.Second)
	return 0
}

func TestCommandDoesNotOutliveAKilledIocorr(t *testing.T) {
	requireRoot(t)
	for _, user := range []string{"", "nobody"} {
		t.Run("user "+user, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), ttyHelperEnv+"=orphan", "IOCORR_TEST_USER="+user)
			cmd.Stderr = os.Stderr
			out, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var pid int
			if _, err := fmt.Fscan(out, &pid); err != nil {
				cmd.Process.Kill()
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(b)) != "sleep" {
				t.Fatalf("child %d is %q, not sleep", pid, b)
			}
			cmd.Process.Kill()
			cmd.Wait()
			for i := 0; ; i++ {
				b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
				// Gone, or a zombie waiting for init to reap it.
				if err != nil || strings.Contains(string(b), ") Z ") {
					break
				}
				if i == 100 {
					syscall.Kill(pid, syscall.SIGKILL)
					t.Fatalf("the command (pid %d) outlived the killed iocorr", pid)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// openPTY opens a pseudo-terminal pair: the master and the slave's name.
func openPTY(t *testing.T) (*os.File, string) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	return m, "/dev/pts/" + strconv.Itoa(n)
}

func TestSignalsReachTheChildExactlyOnce(t *testing.T) {
	requireRoot(t)
	tests := []struct {
		name          string
		onTerminal    bool // the helper is in the foreground of a terminal
		send          func(master *os.File, helper int)
		wantForwarded int
		wantCode      int
	}{
		{
			name:       "Ctrl-C at the terminal reaches the child from the terminal, not again from iocorr",
			onTerminal: true,
			send:       func(m *os.File, _ int) { m.Write([]byte{3}) },
			wantCode:   128 + int(syscall.SIGINT),
		},
		{
			name:          "SIGTERM to iocorr is forwarded",
			onTerminal:    true,
			send:          func(_ *os.File, pid int) { syscall.Kill(pid, syscall.SIGTERM) },
			wantForwarded: 1,
			wantCode:      128 + int(syscall.SIGTERM),
		},
		{
			name:          "SIGINT to iocorr without a terminal is forwarded",
			send:          func(_ *os.File, pid int) { syscall.Kill(pid, syscall.SIGINT) },
			wantForwarded: 1,
			wantCode:      128 + int(syscall.SIGINT),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			master, slaveName := openPTY(t)
			slave, err := os.OpenFile(slaveName, os.O_RDWR|syscall.O_NOCTTY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer slave.Close()
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), ttyHelperEnv+"=1")
			cmd.Stderr = os.Stderr
			// A session of its own, as a login shell's job; with the
			// terminal as its controlling one when asked.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			if tc.onTerminal {
				cmd.Stdin = slave
				cmd.SysProcAttr.Setctty = true
				cmd.SysProcAttr.Ctty = 0
			}
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			sc := bufio.NewScanner(out)
			if !sc.Scan() || sc.Text() != "ready" {
				t.Fatalf("helper said %q", sc.Text())
			}
			time.Sleep(100 * time.Millisecond) // sleep has exec'd
			tc.send(master, cmd.Process.Pid)
			if !sc.Scan() {
				t.Fatal("no report from the helper")
			}
			var recv, fwd, code int
			fmt.Sscan(sc.Text(), &recv, &fwd, &code)
			cmd.Wait()
			if recv != 1 || fwd != tc.wantForwarded || code != tc.wantCode {
				t.Fatalf("received %d, forwarded %d, child exit %d; want 1, %d, %d", recv, fwd, code, tc.wantForwarded, tc.wantCode)
			}
		})
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
	if err != nil || len(st) != 1 || st[0].Reads == 0 {
		t.Fatalf("diskstats of %s: %v %v", DiskName(bd), st, err)
	}
}

func TestSnapshotMapsCopiesTheProcessMaps(t *testing.T) {
	dir := t.TempDir()
	snap, err := SnapshotMaps(dir, 3, os.Getpid(), 42)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, snap.File))
	if err != nil {
		t.Fatal(err)
	}
	if snap.PID != os.Getpid() || snap.MonoNS != 42 || !strings.HasPrefix(snap.File, "maps/0003-") || !strings.Contains(string(b), "[stack]") {
		t.Fatalf("snapshot %+v:\n%.200s", snap, b)
	}
}

func TestHostInfoDescribesThisMachine(t *testing.T) {
	h := HostInfo()
	if h.Kernel == "" || h.NumCPU < 1 || h.MemTotal == 0 || h.PageSize != os.Getpagesize() {
		t.Fatalf("%+v", h)
	}
}
