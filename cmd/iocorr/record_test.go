package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/internal/llmtest"
	"github.com/iocorr/iocorr/internal/proc"
	"github.com/iocorr/iocorr/internal/testenv"
	"github.com/iocorr/iocorr/rundir"
)

func TestRecordKeepsTheChildsExitAndSaysWhatItSearched(t *testing.T) {
	requireBPF(t)
	tests := []struct {
		name     string
		argv     []string
		code     int
		complete bool
		warn     string
	}{
		{"a failing command's status passes through", []string{"sh", "-c", "exit 3"}, 3, true, "no llama.cpp symbols"},
		{"a crash leaves a readable, incomplete run", []string{"sh", "-c", "kill -SEGV $$"}, 128 + int(syscall.SIGSEGV), false, "killed by SIGSEGV"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			_, errOut, err := runCmd(t, append([]string{"record", "-o", dir, "--no-ingest", "--"}, tc.argv...)...)
			var ee exitError
			if !errors.As(err, &ee) || ee.code != tc.code {
				t.Fatalf("err = %v, want exit status %d\n%s", err, tc.code, errOut)
			}
			m, err := rundir.ReadMeta(dir)
			if err != nil {
				t.Fatal(err)
			}
			if m.Child.ExitCode != tc.code || m.Complete != tc.complete {
				t.Fatalf("child %+v complete %v", m.Child, m.Complete)
			}
			if !strings.Contains(strings.Join(m.Warnings, "\n"), tc.warn) {
				t.Fatalf("warnings %q lack %q", m.Warnings, tc.warn)
			}
			if len(m.Lost) == 0 {
				t.Fatal("lost counts missing from the metadata")
			}
			if !strings.Contains(errOut, "lost") || !strings.Contains(errOut, "tokens") {
				t.Fatalf("summary missing:\n%s", errOut)
			}
		})
	}
}

func TestRecordRefusesToOverwriteARunWithoutForce(t *testing.T) {
	requireBPF(t)
	dir := filepath.Join(t.TempDir(), "run")
	if _, _, err := runCmd(t, "record", "-o", dir, "--no-ingest", "--", "true"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCmd(t, "record", "-o", dir, "--no-ingest", "--", "true"); err == nil || !strings.Contains(err.Error(), "use -f") {
		t.Fatalf("second record: %v", err)
	}
	if _, _, err := runCmd(t, "record", "-f", "-o", dir, "--no-ingest", "--", "true"); err != nil {
		t.Fatalf("record -f: %v", err)
	}
	// Never wipe a directory that is not a run.
	other := t.TempDir()
	os.WriteFile(filepath.Join(other, "precious"), []byte("x"), 0o644)
	if _, _, err := runCmd(t, "record", "-f", "-o", other, "--no-ingest", "--", "true"); err == nil {
		t.Fatal("record -f overwrote a directory that is not a run")
	}
	if _, err := os.Stat(filepath.Join(other, "precious")); err != nil {
		t.Fatal("record -f removed a file it did not own")
	}
}

func TestRecordRejectsBadUsage(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"record"}, "no command given"},
		{[]string{"record", "--probe", "all", "--", "true"}, "--probe must be graph or ops, and sched"},
		{[]string{"record", "--mem-limit", "lots", "--", "true"}, "--mem-limit"},
		{[]string{"record", "--mem-limit", "64KiB", "--", "true"}, "below 1MiB"},
		{[]string{"record", "--ringbuf-size", "3000", "--", "true"}, "power of two"},
		{[]string{"record", "--", "no-such-command-iocorr"}, "not found"},
		{[]string{"record", "--model", "/no/such.gguf", "--", "true"}, "no such file"},
	}
	for _, tc := range tests {
		dir := filepath.Join(t.TempDir(), "run")
		_, _, err := runCmd(t, append([]string{tc.args[0], "-o", dir}, tc.args[1:]...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want %q", tc.args, err, tc.want)
		}
		// Nothing was started: no run directory to confuse a later run.
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("%v left a run directory", tc.args)
		}
	}
}

func TestRecordForwardsATerminationAndFinalizesTheRun(t *testing.T) {
	requireBPF(t)
	tmp := t.TempDir()
	dir, mark := filepath.Join(tmp, "run"), filepath.Join(tmp, "started")
	go func() {
		// Only once the command runs: before, nothing in this test
		// process (unlike iocorr's main) would catch the signal.
		for i := 0; i < 1000; i++ {
			if _, err := os.Stat(mark); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		// SIGTERM is forwarded wherever the test runs; Ctrl-C at a
		// terminal is TestRecordCtrlCAtTheTerminal.
		syscall.Kill(os.Getpid(), syscall.SIGTERM)
	}()
	start := time.Now()
	_, errOut, err := runCmd(t, "record", "-o", dir, "--no-ingest", "--", "sh", "-c", "touch "+mark+"; exec sleep 30")
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 128+int(syscall.SIGTERM) {
		t.Fatalf("err = %v, want exit status %d\n%s", err, 128+int(syscall.SIGTERM), errOut)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatal("the child was not interrupted")
	}
	m, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Complete || !strings.Contains(strings.Join(m.Warnings, "\n"), "1 forwarded") || m.End.IsZero() {
		t.Fatalf("meta after SIGTERM: complete %v, warnings %q", m.Complete, m.Warnings)
	}
	if strings.Contains(errOut, "\r") {
		t.Errorf("a live status line went to a stderr that is not a terminal:\n%q", errOut)
	}
}

// helperEnv makes the test binary a helper process (TestHelperProcess)
// instead of running tests.
const helperEnv = "IOCORR_TEST_HELPER"

// TestHelperProcess is not a test. With helperEnv=record the test binary
// is iocorr, run as main runs it, on the arguments after "--"; with
// helperEnv=map it maps the file IOCORR_TEST_FILE and reads its first page.
func TestHelperProcess(t *testing.T) {
	switch os.Getenv(helperEnv) {
	case "":
		return
	case "map":
		f, err := os.Open(os.Getenv("IOCORR_TEST_FILE"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		st, _ := f.Stat()
		mem, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("%q\n", mem[:4])
		// Alive a little longer: record reads /proc/PID/maps once it has
		// seen the mmap, and an exited process has none.
		time.Sleep(300 * time.Millisecond)
		os.Exit(0)
	case "record":
		args := os.Args
		for i, a := range args {
			if a == "--" {
				args = args[i+1:]
				break
			}
		}
		if os.Getenv(growEnv) != "" {
			go growForever()
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := run(ctx, args, os.Stdout, os.Stderr)
		stop()
		var ee exitError
		switch {
		case err == nil:
			os.Exit(0)
		case errors.As(err, &ee):
			os.Exit(ee.code)
		default:
			fmt.Fprintf(os.Stderr, "iocorr: %v\n", err)
			os.Exit(1)
		}
	}
}

// growEnv makes the recording helper process grow by a MiB every 20 ms,
// as a recorder with a leak would: under a memory limit it is then
// killed by the OOM killer.
const growEnv = "IOCORR_TEST_GROW"

// grown keeps what growForever allocated reachable.
var grown [][]byte

func growForever() {
	for {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += os.Getpagesize() {
			b[i] = 1
		}
		grown = append(grown, b)
		time.Sleep(20 * time.Millisecond)
	}
}

// openPTY opens a pseudo-terminal pair: the master and the slave.
var openPTY = testenv.OpenPTY

func TestRecordCtrlCAtTheTerminal(t *testing.T) {
	requireBPF(t)
	master, slave := openPTY(t)
	tmp := t.TempDir()
	dir, mark := filepath.Join(tmp, "run"), filepath.Join(tmp, "started")
	// iocorr in the foreground of a terminal of its own, as at a shell.
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "--",
		"record", "-o", dir, "--no-ingest", "--", "sh", "-c", "touch "+mark+"; sleep 1; exec sleep 30")
	cmd.Env = append(os.Environ(), helperEnv+"=record")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var screen bytes.Buffer
	read := make(chan struct{})
	go func() { io.Copy(&screen, master); close(read) }()
	for i := 0; ; i++ {
		if _, err := os.Stat(mark); err == nil {
			break
		}
		if i == 200 {
			t.Fatal("the command never started")
		}
		time.Sleep(25 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // a status line or two
	master.Write([]byte{3})             // Ctrl-C
	err := cmd.Wait()
	slave.Close()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGINT) {
		t.Fatalf("iocorr ended with %v, want exit status %d", err, 128+int(syscall.SIGINT))
	}
	master.Close()
	<-read
	m, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Ctrl-C reached the command from the terminal, and iocorr did not
	// send it a second one (llama-cli quits on a second SIGINT). This is
	// not a race: a command the terminal's signal already killed is known
	// to have been in iocorr's foreground group (launch.ForwardSignals).
	w := strings.Join(m.Warnings, "\n")
	if m.Complete || m.Child.Signal != "SIGINT" || !strings.Contains(w, "killed by SIGINT") || !strings.Contains(w, "1 signal(s) received, 0 forwarded") {
		t.Fatalf("child %+v, complete %v, warnings %q", m.Child, m.Complete, m.Warnings)
	}
	out := screen.String()
	if !strings.Contains(out, "\r\033[Kiocorr: ") || !strings.Contains(out, "iocorr: recorded") {
		t.Fatalf("no live status line or summary on the terminal:\n%q", out)
	}
}

func TestRecordOnAFullDiskLeavesAReadableIncompleteRun(t *testing.T) {
	requireBPF(t)
	mnt := t.TempDir()
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatalf("mounting a small tmpfs: %v", err)
	}
	defer syscall.Unmount(mnt, syscall.MNT_DETACH)
	dir := filepath.Join(mnt, "run")
	// dd touches its 32 MiB buffer page by page: thousands of fault
	// records, far more than 64 KiB.
	_, errOut, err := runCmd(t, "record", "-o", dir, "--no-ingest", "--", "dd", "if=/dev/zero", "of=/dev/null", "bs=32M", "count=2")
	if err == nil || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("err = %v, want no space left on device\n%s", err, errOut)
	}
	m, rerr := rundir.ReadMeta(dir)
	if rerr != nil {
		t.Fatalf("no readable metadata after the disk filled: %v", rerr)
	}
	warnings := strings.Join(m.Warnings, "\n")
	if m.Complete || !strings.Contains(warnings, "no space left") || m.Child.ExitCode != 0 || m.Child.MinFlt == 0 || m.End.IsZero() {
		t.Fatalf("complete %v, child %+v, warnings %q", m.Complete, m.Child, m.Warnings)
	}
	n := 0
	spoolEventsLoose(t, dir, func(uint16, []byte) { n++ })
	if n == 0 {
		t.Fatal("nothing readable in the spool")
	}
	if _, err := os.Stat(filepath.Join(dir, ".meta-reserve")); err == nil {
		t.Error("the metadata reserve was left behind")
	}
	t.Logf("%d records kept; %v", n, err)
}

// spoolEventsLoose reads a spool that may end in a torn frame.
func spoolEventsLoose(t *testing.T, dir string, fn func(typ uint16, rec []byte)) {
	t.Helper()
	r, err := ingest.OpenSpool(filepath.Join(dir, rundir.SpoolFile))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for {
		rec, err := r.Next()
		if err != nil {
			return
		}
		fn(ingest.RecordType(rec), rec)
	}
}

func TestRecordRunsTheCommandAsTheGivenUserAndHandsThemTheRun(t *testing.T) {
	requireBPF(t)
	u, err := proc.LookupUser("nobody")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "run")
	out, errOut, err := runCmd(t, "record", "-o", dir, "--no-ingest", "--user", "nobody", "--", "id", "-u")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	if strings.TrimSpace(out) != strconv.Itoa(int(u.UID)) {
		t.Fatalf("command ran as %q", out)
	}
	m, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Child.UID != int(u.UID) {
		t.Errorf("metadata says uid %d", m.Child.UID)
	}
	for _, f := range []string{"", rundir.MetaFile, rundir.SpoolFile} {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(dir, f), &st); err != nil || st.Uid != u.UID {
			t.Errorf("%s/%s belongs to uid %d (%v), want %d", dir, f, st.Uid, err, u.UID)
		}
	}
}

func TestRecordColdUnderAMemoryLimit(t *testing.T) {
	requireBPF(t)
	// About 50 MB of weights read through a 16 MiB cgroup.
	model := llmtest.Model(t, gguf.SynthSpec{Layers: 2, Embd: 1024, FF: 2816, Heads: 8, Type: llmtest.WeightType})
	dir := filepath.Join(t.TempDir(), "run")
	_, errOut, err := runCmd(t, "record", "-o", dir, "--no-ingest", "--model", model, "--cold", "--mem-limit", "16MiB",
		"--", "dd", "if="+model, "of=/dev/null", "bs=1M")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	m, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Models) != 1 {
		t.Fatalf("%d models", len(m.Models))
	}
	mf := m.Models[0]
	if mf.ResidentBefore != 0 || len(mf.Tensors) == 0 || len(mf.Extents) == 0 || mf.Block.DiskDev == 0 {
		t.Fatalf("model %s: resident before %d, %d tensors, %d extents, block %+v", mf.Path, mf.ResidentBefore, len(mf.Tensors), len(mf.Extents), mf.Block)
	}
	c := m.Controls
	if c.Cgroup == "" || c.MemLimit != 16<<20 || c.CgroupCounters == nil {
		t.Fatalf("controls %+v", c)
	}
	if _, err := os.Stat(c.Cgroup); !os.IsNotExist(err) {
		t.Errorf("cgroup %s left behind", c.Cgroup)
	}
	if peak := c.CgroupCounters["memory.max_usage_in_bytes"] + c.CgroupCounters["memory.peak"]; peak == 0 || peak > 16<<20 {
		t.Errorf("cgroup peak %d for a 16 MiB limit", peak)
	}
	// Every page of the model came into the page cache under the eyes of
	// the tracer, and off the disk.
	var added, readModel uint64
	spoolEvents(t, dir, func(typ uint16, rec []byte) {
		switch uint32(typ) {
		case uint32(bpf.IocorrEventTypeEV_PAGE_RUN):
			e := decoded(t, rec).PageRun()
			if e.Ino == mf.Ino && e.Dev == mf.Dev && e.Kind == uint16(bpf.IocorrEventTypeEV_PAGE_ADD) {
				added += uint64(e.NrPages)
			}
		case uint32(bpf.IocorrEventTypeEV_BLOCK):
			e := decoded(t, rec).Block()
			if e.Dev != mf.Block.DiskDev || kernel.BlockOpOf(e.CmdFlags) != kernel.BlockRead {
				return
			}
			start := (e.Sector - mf.Block.PartStartSector) * 512
			for _, x := range mf.Extents {
				if lo, hi := max(start, x.Physical), min(start+uint64(e.Bytes), x.Physical+x.Length); lo < hi {
					readModel += hi - lo
				}
			}
		}
	})
	if added < uint64(mf.Pages) || readModel < uint64(mf.Size)&^4095 {
		t.Fatalf("%d pages added of %d, %d bytes read of %d", added, mf.Pages, readModel, mf.Size)
	}
	t.Logf("%d pages added for a %d-page model, %d bytes of it read; cgroup %v", added, mf.Pages, readModel, c.CgroupCounters)
}

func TestRecordFindsAModelTheCommandMapsAndSaysItWasLate(t *testing.T) {
	requireBPF(t)
	model := llmtest.Model(t, gguf.SynthSpec{Layers: 1, Embd: 256, FF: 512, Heads: 4, Type: llmtest.WeightType})
	t.Setenv(helperEnv, "map")
	t.Setenv("IOCORR_TEST_FILE", model) // not on the command line
	dir := filepath.Join(t.TempDir(), "run")
	out, errOut, err := runCmd(t, "record", "-o", dir, "--no-ingest", "--", os.Args[0], "-test.run=^TestHelperProcess$")
	if err != nil || !strings.Contains(out, "GGUF") {
		t.Fatalf("%v: %s\n%s", err, out, errOut)
	}
	m, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Models) != 1 || m.Models[0].Path != model || len(m.Models[0].Tensors) == 0 {
		t.Fatalf("models %+v", m.Models)
	}
	if !strings.Contains(strings.Join(m.Warnings, "\n"), "became known only when it was mapped") {
		t.Errorf("warnings %q", m.Warnings)
	}
	if len(m.Maps) != 1 {
		t.Fatalf("maps snapshots %+v", m.Maps)
	}
	b, err := os.ReadFile(filepath.Join(dir, m.Maps[0].File))
	if err != nil || !strings.Contains(string(b), model) {
		t.Fatalf("maps snapshot %s does not show the model: %v\n%s", m.Maps[0].File, err, b)
	}
}
