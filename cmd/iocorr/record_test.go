//go:build linux

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

	"github.com/iocorr/iocorr/internal/proc"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/testenv"
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
		{[]string{"record", "--probe", "all", "--", "true"}, "--probe must be graph or ops, and pagecache, sched or faults"},
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
// is iocorr, run as main runs it, on the arguments after "--".
func TestHelperProcess(t *testing.T) {
	switch os.Getenv(helperEnv) {
	case "":
		return
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

func TestRecordRunsTheCommandAsTheGivenUserAndHandsThemTheRun(t *testing.T) {
	requireBPF(t)
	u, err := proc.LookupUser("nobody")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "run")
	out, errOut, err := runCmd(t, "record", "-o", dir, "--user", "nobody", "--", "id", "-u")
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
	// The run and the store built after it, every file of them.
	for _, f := range []string{"", rundir.MetaFile, rundir.SpoolFile, rundir.DBDir} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		var st unix.Stat_t
		if err == nil {
			err = unix.Lstat(p, &st)
		}
		if err != nil || st.Uid != u.UID {
			t.Errorf("%s belongs to uid %d (%v), want %d", p, st.Uid, err, u.UID)
		}
		return nil
	})
}
