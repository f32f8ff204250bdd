package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

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
		{[]string{"record", "--probe", "all", "--", "true"}, "--probe must be graph or ops"},
		{[]string{"record", "--mem-limit", "lots", "--", "true"}, "--mem-limit"},
	}
	for _, tc := range tests {
		_, _, err := runCmd(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestRecordForwardsCtrlCAndFinalizesTheRun(t *testing.T) {
	requireBPF(t)
	dir := filepath.Join(t.TempDir(), "run")
	go func() {
		time.Sleep(700 * time.Millisecond)
		syscall.Kill(os.Getpid(), syscall.SIGINT)
	}()
	start := time.Now()
	_, errOut, err := runCmd(t, "record", "-o", dir, "--no-ingest", "--", "sleep", "30")
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 128+int(syscall.SIGINT) {
		t.Fatalf("err = %v, want exit status %d\n%s", err, 128+int(syscall.SIGINT), errOut)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatal("the child was not interrupted")
	}
	m, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Complete || !strings.Contains(strings.Join(m.Warnings, "\n"), "interrupted") || m.End.IsZero() {
		t.Fatalf("meta after Ctrl-C: complete %v, warnings %q", m.Complete, m.Warnings)
	}
}
