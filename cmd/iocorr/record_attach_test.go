package main

import (
	"bufio"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/internal/llmtest"
	"github.com/iocorr/iocorr/rundir"
)

// TestRecordAttachedToARunningProcessCountsItsOwnMajorFaults attaches
// `record -p` to the page toucher while it waits, lets it touch cold
// pages of a file (one major fault each), and ends when it exits. The
// run says it was attached; the process's own majflt delta over the
// window (read from /proc/PID/stat, frozen, at both ends) equals the
// major faults recorded for it, and equals what the toucher counted
// itself (its rusage around the touching). The process is left untraced and ends as it would.
func TestRecordAttachedToARunningProcessCountsItsOwnMajorFaults(t *testing.T) {
	requireBPF(t)
	toucher := llmtest.BuildToucher(t)
	root, err := llmtest.Root()
	if err != nil {
		t.Fatal(err)
	}
	// On the repository's disk: os.TempDir may be tmpfs, where no fault
	// is major.
	fdir, err := os.MkdirTemp(root, ".coldfile-attach-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(fdir) })
	file := filepath.Join(fdir, "cold.bin")
	b := make([]byte, 64*os.Getpagesize())
	rand.Read(b)
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		pages string
	}{
		{"three scattered pages", "5,6,40"},
		{"ten pages", "0,2,4,8,16,20,30,50,60,63"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(toucher, "-file", file, "-pages", tc.pages, "-evict", "-wait")
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			cmd.Stdout = &out
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			if _, err := bufio.NewReader(stderr).ReadString('\n'); err != nil {
				t.Fatalf("toucher: %v", err)
			}
			go io.Copy(io.Discard, stderr)
			pid := cmd.Process.Pid
			dir := filepath.Join(t.TempDir(), "run")
			type result struct {
				summary string
				err     error
			}
			done := make(chan result, 1)
			go func() {
				_, summary, err := runCmd(t, "record", "-o", dir, "-p", strconv.Itoa(pid), "--duration", "60s")
				done <- result{summary, err}
			}()
			// Attached once meta.json says so: the process is traced from
			// then on.
			deadline := time.Now().Add(20 * time.Second)
			for {
				if m, err := rundir.ReadMeta(dir); err == nil && m.Attached != nil && m.MonoStartNS != 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("record -p did not attach in 20s")
				}
				time.Sleep(20 * time.Millisecond)
			}
			if _, err := io.WriteString(stdin, "g"); err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil {
				t.Fatalf("record -p: %v\n%s", r.err, r.summary)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("the toucher did not end well after the detach: %v", err)
			}
			var rep llmtest.ToucherReport
			if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
				t.Fatalf("toucher printed %q: %v", out.String(), err)
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
			spoolEvents(t, dir, func(typ uint16, rec []byte) {
				if uint32(typ) != uint32(bpf.IocorrEventTypeEV_FAULT) {
					return
				}
				e := (*bpf.IocorrFaultEvent)(unsafe.Pointer(&rec[0]))
				if e.Class == uint8(bpf.IocorrFaultClassFAULT_MAJOR) && int(e.Hdr.Tgid) == pid {
					major++
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
// equals the major faults recorded, and the process goes on generating
// after the detach and ends as it would have (exit 0).
func TestRecordAttachedMidGenerationRecordsEveryDecodeCallInTheWindow(t *testing.T) {
	model, f := recordableMoE(t)
	bt, err := exec.LookPath("bpftrace")
	if err != nil {
		t.Fatalf("bpftrace (make setup): %v", err)
	}
	bin := llmtest.CLI(t, llmtest.Shared, "llama-completion")
	lib := filepath.Join(llmtest.SharedLibDir(t), "libllama.so")
	args := llmtest.CompletionArgs(bin, model, 120)
	llama := exec.Command(args[0], args[1:]...)
	if err := llama.Start(); err != nil {
		t.Fatal(err)
	}
	defer llama.Process.Kill()
	pid := llama.Process.Pid
	trace := exec.Command(bt, "-e", fmt.Sprintf(`uprobe:%s:llama_decode /pid == %d/ { printf("%%llu\n", nsecs); }`, lib, pid))
	tout, err := trace.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := trace.Start(); err != nil {
		t.Fatal(err)
	}
	defer trace.Process.Kill()
	calls := make(chan []uint64, 1)
	started := make(chan struct{})
	sc := bufio.NewScanner(tout)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "Attaching") {
		t.Fatalf("bpftrace said %q", sc.Text())
	}
	go func() {
		var ts []uint64
		for sc.Scan() {
			if v, err := strconv.ParseUint(sc.Text(), 10, 64); err == nil {
				if ts = append(ts, v); len(ts) == 4 {
					close(started)
				}
			}
		}
		calls <- ts
	}()
	// Mid-generation: a few tokens made, most to come.
	select {
	case <-started:
	case <-time.After(60 * time.Second):
		t.Fatal("llama-completion made no 4 llama_decode calls in 60s")
	}
	dir := filepath.Join(t.TempDir(), "run")
	if _, summary, err := runCmd(t, "record", "-o", dir, "-p", strconv.Itoa(pid), "--duration", "3s"); err != nil {
		t.Fatalf("record -p: %v\n%s", err, summary)
	}
	if err := llama.Wait(); err != nil {
		t.Fatalf("llama-completion after the detach: %v", err)
	}
	trace.Process.Signal(os.Interrupt)
	ts := <-calls
	trace.Wait()
	m, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	var inWindow, after int
	for _, v := range ts {
		switch {
		case v >= m.MonoStartNS && v <= m.MonoEndNS:
			inWindow++
		case v > m.MonoEndNS:
			after++
		}
	}
	prefill, decode := countDecodeCalls(t, dir, f, map[string]bool{}, nil)
	if prefill+decode != inWindow || inWindow == 0 {
		t.Errorf("recorded %d llama_decode calls, bpftrace saw the process make %d in the window (of %d)", prefill+decode, inWindow, len(ts))
	}
	if after == 0 {
		t.Errorf("no llama_decode call after the detach (of %d): the process did not go on", len(ts))
	}
	var major uint64
	spoolEvents(t, dir, func(typ uint16, rec []byte) {
		if uint32(typ) == uint32(bpf.IocorrEventTypeEV_FAULT) {
			e := (*bpf.IocorrFaultEvent)(unsafe.Pointer(&rec[0]))
			if e.Class == uint8(bpf.IocorrFaultClassFAULT_MAJOR) && int(e.Hdr.Tgid) == pid {
				major++
			}
		}
	})
	a := m.Attached
	if a == nil || a.Exited || major != a.MajFltAfter-a.MajFltBefore {
		t.Errorf("attached %+v: major faults recorded %d, want the majflt delta", a, major)
	}
	if len(m.Models) != 1 || m.Layout == nil || m.Layout.Invalid != "" {
		t.Errorf("models %d, layout %+v: want the model found in the maps and a valid layout", len(m.Models), m.Layout)
	}
	t.Logf("window %.2fs: %d llama_decode calls (bpftrace %d of %d, %d after), majflt %d → %d",
		float64(m.MonoEndNS-m.MonoStartNS)/1e9, prefill+decode, inWindow, len(ts), after, a.MajFltBefore, a.MajFltAfter)
}
