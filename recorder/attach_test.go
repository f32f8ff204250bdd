package recorder_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/iocorr/iocorr/internal/cgroup"
	"github.com/iocorr/iocorr/internal/pagecache"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/rectest"
	"github.com/iocorr/iocorr/testkit/spooltest"
	"github.com/iocorr/iocorr/testkit/testenv"
	"github.com/iocorr/iocorr/wire"
)

// TestRecordAttachedToARunningProcessCountsItsOwnMajorFaults attaches
// `record -p` to the page toucher while it waits, lets it touch cold
// pages of a file (one major fault each), and ends when it exits. The
// run says it was attached; the process's own majflt delta over the
// window (read from /proc/PID/stat, frozen, at both ends) equals the
// major faults recorded for it, and equals what the toucher counted
// itself (its rusage around the touching). The process is left untraced and ends as it would.
func TestRecordAttachedToARunningProcessCountsItsOwnMajorFaults(t *testing.T) {
	testenv.RequireBPF(t)
	toucher := llmtest.BuildToucher(t)
	// On the package's disk (testenv.DiskFile): os.TempDir may be tmpfs,
	// where no fault is major.
	file := testenv.RandomDiskFile(t, 64*os.Getpagesize())
	tests := []struct {
		name  string
		pages string
	}{
		{"three scattered pages", "5,6,40"},
		{"ten pages", "0,2,4,8,16,20,30,50,60,63"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := llmtest.StartWaitingToucher(t, toucher, "-file", file, "-pages", tc.pages, "-evict")
			pid := w.PID
			dir := filepath.Join(t.TempDir(), "run")
			done := recordAttached(t.Context(), t, dir, pid, 60*time.Second, 20*time.Second)
			if err := w.Go(); err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil {
				t.Fatalf("record -p: %v\n%s", r.err, r.out.Stderr)
			}
			rep, err := w.Wait()
			if err != nil {
				t.Fatalf("the toucher did not end well after the detach: %v", err)
			}
			m, err := rundir.ReadMeta(dir)
			if err != nil {
				t.Fatal(err)
			}
			a := m.Attached
			if a == nil || a.PID != pid || !a.Exited {
				t.Fatalf("meta.json attached = %+v, want pid %d, exited", a, pid)
			}
			var major uint64
			spooltest.Faults(t, dir, func(h *wire.EventHdr, class uint8, n uint64, _ *wire.FaultEvent) {
				if class == uint8(wire.FaultClassFAULT_MAJOR) && int(h.Tgid) == pid {
					major += n
				}
			})
			delta := a.MajFltAfter - a.MajFltBefore
			if major != delta || uint64(m.Child.MajFlt) != delta || delta != uint64(rep.MajFlt) || delta == 0 {
				t.Errorf("major faults recorded %d, majflt delta %d (meta child %d), the toucher's own count while touching %d: want all equal, not 0",
					major, delta, m.Child.MajFlt, rep.MajFlt)
			}
			if !strings.Contains(fmt.Sprint(m.Command), toucher) {
				t.Errorf("command %v, want the process's own", m.Command)
			}
			t.Logf("attached to %d: majflt %d → %d, %d major faults recorded", pid, a.MajFltBefore, a.MajFltAfter, major)
		})
	}
}

// TestRecordAttachedMidGenerationRecordsEveryDecodeCallInTheWindow
// attaches `record -p --duration` to llama-completion while it generates.
// bpftrace, a tracer of its own, stamps each llama_decode call of the
// process (CLOCK_MONOTONIC, as the run's window is stamped): the run
// holds exactly the calls made inside its window, its majflt delta
// equals the major faults recorded and is not 0, and the process goes on
// generating after the detach, untraced and not stopped, until the test
// ends it.
//
// The generation has no end of its own (-n -1, the context shifted when
// full) and runs from a cold model under a memory limit its weights do
// not fit, so that however fast the machine, the process is still
// decoding, and reading experts from the disk, when the window closes.
// A bounded generation ended inside the window on a fast machine.
func TestRecordAttachedMidGenerationRecordsEveryDecodeCallInTheWindow(t *testing.T) {
	model, f := rectest.RecordableMoE(t)
	bt, err := exec.LookPath("bpftrace")
	if err != nil {
		t.Fatalf("bpftrace (make setup): %v", err)
	}
	bin := llmtest.CLI(t, llmtest.Shared, "llama-completion")
	lib := filepath.Join(llmtest.SharedLibDir(t), "libllama.so")
	cg, err := cgroup.NewMemory(fmt.Sprintf("iocorr-test-attach-%d", os.Getpid()), llmtest.MemLimitBytes)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Remove()
	if resident, _, err := pagecache.Evict(model); err != nil || resident != 0 {
		t.Fatalf("evicting the model: %d pages stayed resident, %v", resident, err)
	}
	args := append(llmtest.CompletionArgs(bin, model, -1), "--context-shift")
	llama := exec.Command(args[0], args[1:]...)
	if cg.Version == 2 {
		// Into the cgroup at the clone, so that every page of the model
		// it reads is charged there.
		d, err := os.Open(cg.Path)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		llama.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(d.Fd())}
	}
	if err := llama.Start(); err != nil {
		t.Fatal(err)
	}
	defer llama.Process.Kill()
	pid := llama.Process.Pid
	if cg.Version != 2 {
		if err := cg.Add(pid); err != nil {
			t.Fatal(err)
		}
	}
	sc, interruptTrace := stampDecodeCalls(t, bt, lib, pid)
	var (
		mu    sync.Mutex
		ts    []uint64
		ended = make(chan struct{})
	)
	stamps := func() []uint64 {
		mu.Lock()
		defer mu.Unlock()
		return append([]uint64(nil), ts...)
	}
	go func() {
		defer close(ended)
		for sc.Scan() {
			if v, err := strconv.ParseUint(sc.Text(), 10, 64); err == nil {
				mu.Lock()
				ts = append(ts, v)
				mu.Unlock()
			}
		}
	}()
	// waitCalls waits until bpftrace has seen n calls after mono (0: any).
	waitCalls := func(n int, mono uint64, what string) {
		deadline := time.Now().Add(60 * time.Second)
		for {
			k := 0
			for _, v := range stamps() {
				if v > mono {
					k++
				}
			}
			if k >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("llama-completion made %d llama_decode calls %s in 60s, want %d", k, what, n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Mid-generation: a few tokens made, and no end to come.
	waitCalls(4, 0, "at all")
	dir := filepath.Join(t.TempDir(), "run")
	if out, err := rectest.RecordAttachedErr(t.Context(), dir, pid, 3*time.Second); err != nil {
		t.Fatalf("record -p: %v\n%s", err, out.Stderr)
	}
	m, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	// It goes on after the detach: more calls, no tracer, not stopped.
	waitCalls(3, m.MonoEndNS, "after the detach")
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("llama-completion after the detach: %v", err)
	}
	for _, l := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(l, "State:\t"); ok && !strings.ContainsAny(v[:1], "RSD") {
			t.Errorf("llama-completion after the detach is %q, want running or sleeping", v)
		}
		if v, ok := strings.CutPrefix(l, "TracerPid:\t"); ok && v != "0" {
			t.Errorf("llama-completion is still ptraced after the detach, by %s", v)
		}
	}
	// It ends by the test's signal and by nothing else.
	llama.Process.Signal(syscall.SIGTERM)
	if err := llama.Wait(); err == nil || llama.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Errorf("llama-completion ended with %v, want by the test's SIGTERM", err)
	}
	interruptTrace()
	<-ended
	var inWindow, after int
	all := stamps()
	for _, v := range all {
		switch {
		case v >= m.MonoStartNS && v <= m.MonoEndNS:
			inWindow++
		case v > m.MonoEndNS:
			after++
		}
	}
	prefill, decode := rectest.CountDecodeCalls(t, dir, f, nil, nil)
	if prefill+decode != inWindow || inWindow == 0 {
		t.Errorf("recorded %d llama_decode calls, bpftrace saw the process make %d in the window (of %d)", prefill+decode, inWindow, len(all))
	}
	var major uint64
	spooltest.Faults(t, dir, func(h *wire.EventHdr, class uint8, n uint64, _ *wire.FaultEvent) {
		if class == uint8(wire.FaultClassFAULT_MAJOR) && int(h.Tgid) == pid {
			major += n
		}
	})
	a := m.Attached
	if a == nil {
		t.Fatal("meta.json does not say the run was attached")
	}
	if a.Exited || major != a.MajFltAfter-a.MajFltBefore || major == 0 {
		t.Errorf("attached %+v: major faults recorded %d, want the majflt delta, not 0", a, major)
	}
	if len(m.Models) != 1 || m.Layout == nil || m.Layout.Invalid != "" {
		t.Errorf("models %d, layout %+v: want the model found in the maps and a valid layout", len(m.Models), m.Layout)
	}
	t.Logf("window %.2fs: %d llama_decode calls (bpftrace %d of %d, %d after), majflt %d → %d",
		float64(m.MonoEndNS-m.MonoStartNS)/1e9, prefill+decode, inWindow, len(all), after, a.MajFltBefore, a.MajFltAfter)
}
