package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// `iocorr inspect m.gguf | head` must end as any Unix tool does when its
// reader goes away: quietly. A write to stdout dies of SIGPIPE (as cat and
// git do), with nothing on stderr.
func TestInspectIntoAClosedPipeDiesOfSIGPIPEQuietly(t *testing.T) {
	model := synthModel(t, smallMoE)
	bin := filepath.Join(t.TempDir(), "iocorr")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building iocorr: %v: %s", err, out)
	}
	for _, format := range []string{"table", "csv", "json"} {
		t.Run(format, func(t *testing.T) {
			var stderr bytes.Buffer
			cmd := exec.Command(bin, "inspect", "--format", format, model)
			cmd.Stdout, cmd.Stderr = closedPipe(t), &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("inspect into a closed pipe: %v, want death by SIGPIPE", err)
			}
			ws := exit.Sys().(syscall.WaitStatus)
			if !ws.Signaled() || ws.Signal() != syscall.SIGPIPE {
				t.Errorf("inspect ended with %v, want death by SIGPIPE", ws)
			}
			if stderr.Len() > 0 {
				t.Errorf("inspect printed %q on stderr", stderr.String())
			}
		})
	}
}

// An output other than fd 1 and 2 (export -o /dev/stdout) gets EPIPE as an
// error instead of the signal; it must reach main as EPIPE, which then ends
// quietly with the status of a death by SIGPIPE.
func TestInspectIntoAClosedPipeOnAnotherDescriptorReturnsEPIPE(t *testing.T) {
	model := synthModel(t, smallMoE)
	for _, format := range []string{"table", "csv", "json"} {
		t.Run(format, func(t *testing.T) {
			w := closedPipe(t)
			var errb bytes.Buffer
			err := run(context.Background(), []string{"inspect", "--format", format, model}, w, &errb)
			if !errors.Is(err, syscall.EPIPE) {
				t.Errorf("inspect into a closed pipe on fd %d: %v, want EPIPE", w.Fd(), err)
			}
		})
	}
}

// closedPipe is the write end of a pipe whose reader is already gone, as
// after head has read its lines, so that the first write fails whatever
// the timing.
func closedPipe(t *testing.T) *os.File {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	t.Cleanup(func() { w.Close() })
	return w
}
