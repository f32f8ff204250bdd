package recorder_test

import (
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/rectest"
	"github.com/iocorr/iocorr/testkit/testenv"
)

// TestRecorderSleepsWhileTheCommandStartsThreads records a command that
// starts and joins a thread every 2–3 ms for 1.5 s, as node-llama-cpp starts
// its compute threads for every token, and the same time of a command
// that only sleeps: the recorder may not wake for each thread. Every wake
// of iocorr lands on the CPUs the command runs on, and on this VM a
// program that hands work between threads ran up to several times
// faster beside a process that merely woke often (docs/overhead.md,
// session 14); woken by every thread's start record, the recorder woke
// about 3 times a thread.
func TestRecorderSleepsWhileTheCommandStartsThreads(t *testing.T) {
	testenv.RequireBPF(t)
	const (
		churn = `use threads; use Time::HiRes qw(time sleep); my $n = 0; my $end = time + 1.5; ` +
			`while (time < $end) { threads->create(sub { 1 })->join; $n++; sleep 0.002 } print "$n\n"`
		idle = `use Time::HiRes qw(sleep); sleep 1.5; print "0\n"`
		// The reader's 100 ms poll and the fill level are what may
		// wake it: 0.11-0.15 wakes a thread measured (~550 threads; a
		// recording's own wakes vary by ~150), 2.9-3.6 when each
		// thread's start woke the reader.
		maxPerThread = 1.5
	)
	record := func(name, script string) (wakes int64, threads int) {
		var before, after syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &before); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir(), name)
		out := rectest.Record(t, dir, rectest.Options{}, "perl", "-e", script)
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &after); err != nil {
			t.Fatal(err)
		}
		// meta.json's count, of the command's run alone, is part of what
		// this process counted over the whole recording.
		m, err := rundir.ReadMeta(dir)
		if err != nil {
			t.Fatal(err)
		}
		if m.Recorder == nil || m.Recorder.WakesWhile == nil || *m.Recorder.WakesWhile <= 0 || *m.Recorder.WakesWhile > after.Nvcsw-before.Nvcsw {
			t.Errorf("%s: meta.json's recorder %+v: want its wakes while the command ran, in (0, %d]", name, m.Recorder, after.Nvcsw-before.Nvcsw)
		}
		n, err := strconv.Atoi(strings.TrimSpace(out.Stdout))
		if err != nil {
			t.Fatalf("%s printed %q, not its thread count", name, out.Stdout)
		}
		return after.Nvcsw - before.Nvcsw, n
	}
	// The first recording of a process pays what later ones find done
	// (~250 wakes here): it is not compared.
	record("warm-up", `print "0\n"`)
	idleWakes, _ := record("idle", idle)
	churnWakes, threads := record("churn", churn)
	if threads < 200 {
		t.Fatalf("the command started %d threads in 1.5 s, too few to tell", threads)
	}
	perThread := float64(churnWakes-idleWakes) / float64(threads)
	t.Logf("the recorder woke %d times beside %d threads, %d beside a sleep as long: %.2f a thread", churnWakes, threads, idleWakes, perThread)
	if perThread > maxPerThread {
		t.Errorf("the recorder woke %.2f times for each thread the command started, want at most %.1f", perThread, maxPerThread)
	}
}
