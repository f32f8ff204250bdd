package recorder_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/rectest"
)

// attachedRun is what `record -p` returned.
type attachedRun struct {
	out rectest.Output
	err error
}

// recordAttached runs `record -o dir -p pid --duration d` in the
// background (ctx ending it early, as Ctrl-C does) and returns once meta.json says it attached (the process is
// traced from then on), failing the test after wait; the channel gives
// the command's result.
func recordAttached(ctx context.Context, t *testing.T, dir string, pid int, d, wait time.Duration) <-chan attachedRun {
	t.Helper()
	done := make(chan attachedRun, 1)
	go func() {
		out, err := rectest.RecordAttachedErr(ctx, dir, pid, d)
		done <- attachedRun{out, err}
	}()
	deadline := time.Now().Add(wait)
	for {
		if m, err := rundir.ReadMeta(dir); err == nil && m.Attached != nil && m.MonoStartNS != 0 {
			return done
		}
		if time.Now().After(deadline) {
			t.Fatalf("record -p did not attach in %v", wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stampDecodeCalls starts bpftrace (bt) printing the CLOCK_MONOTONIC time
// of each llama_decode call of pid in lib, an oracle independent of
// iocorr's probes. It returns its output after the "Attaching" line, and
// interrupt, which asks bpftrace to end (its output then ends too).
func stampDecodeCalls(t *testing.T, bt, lib string, pid int) (sc *bufio.Scanner, interrupt func()) {
	t.Helper()
	trace := exec.Command(bt, "-e", fmt.Sprintf(`uprobe:%s:llama_decode /pid == %d/ { printf("%%llu\n", nsecs); }`, lib, pid))
	tout, err := trace.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := trace.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { trace.Process.Kill(); trace.Wait() })
	sc = bufio.NewScanner(tout)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "Attaching") {
		t.Fatalf("bpftrace said %q", sc.Text())
	}
	return sc, func() { trace.Process.Signal(os.Interrupt) }
}
