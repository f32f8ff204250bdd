package recorder_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/recorder"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/rectest"
	"github.com/iocorr/iocorr/testkit/storetest"
	"github.com/iocorr/iocorr/testkit/testenv"
)

// A fault's wait is the time its thread slept off the CPU, as the
// scheduler itself counts it. The toucher faults in cold pages one by one
// (no read-ahead) on one thread that does nothing else, and reads that
// thread's schedstat around the touches: of their wall time, what was
// neither on the CPU nor runnable is sleep, all of it inside the faults.
// iocorr's wait counts from a switch out that was no preemption to the
// switch back in, so it lies between that sleep and the whole time off
// the CPU (the sleep plus every wait for a CPU), within 2% and what the
// clocks' placement adds: the scheduler stops and starts a thread's clock
// at the top of __schedule, the sched_switch tracepoint fires later in
// the same call, so each sleep's switch back in counts the time between
// the two once more (~0.9 µs a fault on the lab's VM, 4% of a 25 µs read
// there; nothing beside a fault on a real disk).
func TestAFaultsWaitIsTheSleepTheSchedulerCountsInIt(t *testing.T) {
	testenv.RequireBPF(t)
	model, _ := rectest.PageableMoE(t)
	st, err := os.Stat(model)
	if err != nil {
		t.Fatal(err)
	}
	// Every page past the header: each a read of its own (the toucher's
	// MADV_RANDOM), a thousand and more, so that the touches take long
	// beside the clocks' resolution.
	var pages []string
	for p := int64(64); (p+1)*4096 <= st.Size(); p++ {
		pages = append(pages, fmt.Sprint(p))
	}
	dir := filepath.Join(t.TempDir(), "run")
	tt := touchTimes(t, rectest.Record(t, dir, rectest.Options{Cold: true, Set: func(o *recorder.Options) { o.Models = []string{model} }},
		llmtest.BuildToucher(t), "-file", model, "-pages", strings.Join(pages, ",")).Stdout)
	c := modelFaults(t, dir)
	wait, stall, major := c.WaitNS, c.StallNS, c.Major
	slept := float64(tt.WallNS - tt.OnCPUNS - tt.RunQueueNS)
	offCPU := float64(tt.WallNS - tt.OnCPUNS)
	t.Logf("%d major faults in the model: stall %.2f ms, wait %.2f ms; the touches: wall %.2f ms, on the CPU %.2f ms, runnable %.2f ms",
		major, float64(stall)/1e6, float64(wait)/1e6, float64(tt.WallNS)/1e6, float64(tt.OnCPUNS)/1e6, float64(tt.RunQueueNS)/1e6)
	if int(major) != len(pages) {
		t.Fatalf("%d major faults in the model, want one per page touched (%d)", major, len(pages))
	}
	// The touches must have slept for the comparison to say anything:
	// cold pages on a block device do, if briefly on a fast one (the
	// lab's reads took ~20 µs).
	if slept < 0.1*float64(tt.WallNS) {
		t.Fatalf("the touches slept %.0f ns of %d: not the I/O-bound loop this test needs", slept, tt.WallNS)
	}
	const perSwitch = 2000 // ns a sleep, at most, between the scheduler's clock and the tracepoint
	if w := float64(wait); w < 0.98*slept || w > 1.02*offCPU+perSwitch*float64(major) {
		t.Errorf("the faults' wait %.0f ns: want between the sleep the scheduler counted (%.0f ns) and the time off the CPU (%.0f ns), within 2%% and %d ns a fault", w, slept, offCPU, perSwitch)
	}
	if wait > stall {
		t.Errorf("wait %d ns exceeds the stall %d ns it is part of", wait, stall)
	}
}

// A fault's time preempted is the time its thread spent runnable off the
// CPU after a preemption inside it. The toucher reads ahead (MADV_NORMAL)
// under a memory limit a fraction of the model's, so that each fault
// reclaims and reads in a window of pages on the CPU, pinned to one CPU
// with a busy loop of the test's beside it, which the scheduler runs
// whenever it preempts the toucher. What the faults spent preempted is
// part of the time the toucher waited runnable (schedstat's run-queue
// time: that and its waits after each wakeup), and with their sleeps no
// more than its time off the CPU.
func TestAFaultsTimePreemptedIsRunQueueTimeTheSchedulerCountsInIt(t *testing.T) {
	testenv.RequireBPF(t)
	model := llmtest.Model(t, llmtest.MoE)
	st, err := os.Stat(model)
	if err != nil {
		t.Fatal(err)
	}
	var pages []string
	for p := int64(64); (p+1)*4096 <= st.Size(); p += 64 {
		pages = append(pages, fmt.Sprint(p))
	}
	stop := spinOnCPU(t, 0)
	dir := filepath.Join(t.TempDir(), "run")
	tt := touchTimes(t, rectest.Record(t, dir, rectest.Options{Cold: true, MemLimit: "24MiB", Set: func(o *recorder.Options) { o.Models = []string{model} }},
		"taskset", "-c", "0", llmtest.BuildToucher(t), "-file", model, "-advice", "normal", "-pages", strings.Join(pages, ",")).Stdout)
	spun := stop()
	c := modelFaults(t, dir)
	wait, preempted, stall, major := c.WaitNS, c.PreemptedNS, c.StallNS, c.Major
	offCPU := float64(tt.WallNS - tt.OnCPUNS)
	t.Logf("%d major faults in the model: stall %.2f ms, wait %.2f ms, preempted %.2f ms; the touches: wall %.2f ms, on the CPU %.2f ms, runnable %.2f ms; the busy loop ran %.2f ms",
		major, float64(stall)/1e6, float64(wait)/1e6, float64(preempted)/1e6, float64(tt.WallNS)/1e6, float64(tt.OnCPUNS)/1e6, float64(tt.RunQueueNS)/1e6, float64(spun)/1e6)
	const perSwitch = 2000 // ns a switch, at most, between the scheduler's clock and the tracepoint
	if preempted == 0 {
		t.Fatalf("no fault was preempted beside a busy loop on its CPU: the test measured nothing")
	}
	if p := float64(preempted); p > 1.02*float64(tt.RunQueueNS)+perSwitch*float64(major) {
		t.Errorf("the faults' time preempted %.0f ns: want no more than the run-queue time the scheduler counted (%.0f ns), within 2%% and %d ns a fault", p, float64(tt.RunQueueNS), perSwitch)
	}
	if w := float64(wait + preempted); w > 1.02*offCPU+perSwitch*float64(major) {
		t.Errorf("the faults' wait and time preempted %.0f ns: want no more than the time off the CPU (%.0f ns), within 2%% and %d ns a fault", w, offCPU, perSwitch)
	}
	if wait+preempted > stall {
		t.Errorf("wait %d ns and time preempted %d ns exceed the stall %d ns they are part of", wait, preempted, stall)
	}
}

// spinOnCPU keeps CPU cpu busy from a thread of the test's until the
// function it returns is called, which says how long the thread ran.
func spinOnCPU(t *testing.T, cpu int) func() time.Duration {
	t.Helper()
	var stop atomic.Bool
	done := make(chan time.Duration)
	ready := make(chan error)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var set unix.CPUSet
		set.Set(cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			ready <- err
			return
		}
		ready <- nil
		var ru0, ru1 unix.Rusage
		unix.Getrusage(unix.RUSAGE_THREAD, &ru0)
		for !stop.Load() {
		}
		unix.Getrusage(unix.RUSAGE_THREAD, &ru1)
		done <- time.Duration(unix.TimevalToNsec(ru1.Utime) - unix.TimevalToNsec(ru0.Utime))
	}()
	if err := <-ready; err != nil {
		t.Fatalf("pinning the busy loop to CPU %d: %v", cpu, err)
	}
	return func() time.Duration {
		stop.Store(true)
		return <-done
	}
}

// threadTimes are the toucher's thread times over its touches, as its
// schedstat counted them.
type threadTimes struct {
	WallNS     int64 `json:"wall_ns"`
	OnCPUNS    int64 `json:"on_cpu_ns"`
	RunQueueNS int64 `json:"run_queue_ns"`
}

// touchTimes reads the thread times of the toucher's report, out.
func touchTimes(t *testing.T, out string) threadTimes {
	t.Helper()
	var rep struct {
		Touch threadTimes `json:"touch"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("toucher said %q: %v", out, err)
	}
	return rep.Touch
}

// modelFaults sums the counters of the run's model tensors.
func modelFaults(t *testing.T, dir string) event.Counters {
	t.Helper()
	var c event.Counters
	if err := storetest.Open(t, dir).Aggs(func(a *event.Agg) error {
		if a.Tensor != event.TensorAnon && a.Tensor != event.TensorOther {
			c.Add(&a.Counters)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return c
}
