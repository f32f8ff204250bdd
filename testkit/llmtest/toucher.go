package llmtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// WaitingToucher is the page toucher (BuildToucher) started with -wait:
// it has mapped its file and said it waits, and touches nothing until Go
// (or SIGUSR1, or an end of stdin followed by SIGUSR1).
type WaitingToucher struct {
	Cmd   *exec.Cmd
	PID   int
	stdin io.WriteCloser
	out   lockedBuffer
}

// StartWaitingToucher starts toucher with args and -wait, and returns once
// it has said, with its pid, that it waits. The test's end kills it.
func StartWaitingToucher(t testing.TB, toucher string, args ...string) *WaitingToucher {
	t.Helper()
	cmd := exec.Command(toucher, append(args, "-wait")...)
	w := &WaitingToucher{Cmd: cmd}
	cmd.Stdout = &w.out
	var err error
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
func (w *WaitingToucher) Printed() []byte { return w.out.Bytes() }

// Wait waits for its end and reads its report.
func (w *WaitingToucher) Wait() (ToucherReport, error) {
	var r ToucherReport
	if err := w.Cmd.Wait(); err != nil {
		return r, fmt.Errorf("the toucher: %w", err)
	}
	if err := json.Unmarshal(w.out.Bytes(), &r); err != nil {
		return r, fmt.Errorf("the toucher printed %q: %w", w.out.Bytes(), err)
	}
	return r, nil
}

// lockedBuffer is a buffer the command's copier writes while a test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.b.Bytes())
}
