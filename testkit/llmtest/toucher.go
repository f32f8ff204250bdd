package llmtest

import (
	"bufio"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// WaitingToucher is the page toucher (BuildToucher) started with -wait:
// it has mapped its file and said it waits, and touches nothing until Go
// (or SIGUSR1, or an end of stdin followed by SIGUSR1).
type WaitingToucher struct {
	Cmd   *exec.Cmd
	PID   int
	stdin io.WriteCloser
	// out is its stdout, a file: it writes there itself, and a test may
	// read what it printed while it runs.
	out string
}

// StartWaitingToucher starts toucher with args and -wait, and returns once
// it has said, with its pid, that it waits. The test's end kills it.
func StartWaitingToucher(t testing.TB, toucher string, args ...string) *WaitingToucher {
	t.Helper()
	cmd := exec.Command(toucher, append(args, "-wait")...)
	w := &WaitingToucher{Cmd: cmd, out: filepath.Join(t.TempDir(), "toucher.out")}
	out, err := os.Create(w.out)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout = out
	if w.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.PID = cmd.Process.Pid
	t.Cleanup(func() { cmd.Process.Kill() })
	line, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil || !strings.Contains(line, fmt.Sprintf("pid %d ", w.PID)) || !strings.Contains(line, "waiting") {
		t.Fatalf("the toucher said %q (%v), want its pid and that it waits", line, err)
	}
	go io.Copy(io.Discard, stderr)
	return w
}

// Go lets the toucher touch its pages: a byte on its stdin.
func (w *WaitingToucher) Go() error {
	_, err := io.WriteString(w.stdin, "g")
	return err
}

// CloseStdin ends its stdin, which is no go: it then waits for SIGUSR1.
func (w *WaitingToucher) CloseStdin() error { return w.stdin.Close() }

// Printed is what it has printed so far (its report comes at its end).
func (w *WaitingToucher) Printed() []byte {
	b, _ := os.ReadFile(w.out)
	return b
}

// Wait waits for its end and reads its report.
func (w *WaitingToucher) Wait() (ToucherReport, error) {
	var r ToucherReport
	if err := w.Cmd.Wait(); err != nil {
		return r, fmt.Errorf("the toucher: %w", err)
	}
	out := w.Printed()
	if err := json.Unmarshal(out, &r); err != nil {
		return r, fmt.Errorf("the toucher printed %q: %w", out, err)
	}
	return r, nil
}

// DiskTempDir is a directory removed at the test's end on the
// repository's disk, not a tmpfs: a file there is read from the device
// once it is evicted.
func DiskTempDir(t testing.TB) string {
	t.Helper()
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(root, ".coldfile-llmtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// ColdFile writes size random bytes to a file on the repository's disk:
// os.TempDir may be tmpfs, where a fault never reads from a device and so
// is never major.
func ColdFile(t testing.TB, size int) string {
	t.Helper()
	dir := DiskTempDir(t)
	b := make([]byte, size)
	rand.Read(b)
	p := filepath.Join(dir, "cold.bin")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
