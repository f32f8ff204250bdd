package recorder

import (
	"context"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iocorr/iocorr/internal/proc"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/wire"
)

func taskEvent(kind wire.TaskKind, tgid, child int) *wire.TaskEvent {
	e := &wire.TaskEvent{Kind: uint32(kind), Child: uint32(child)}
	e.Hdr.Tgid = uint32(tgid)
	return e
}

// warnings collects what a family says.
type warnings []string

func (w *warnings) warn(s string) { *w = append(*w, s) }

func TestFamilyKeepsItsLiveProcessesAndCountsAllItTraced(t *testing.T) {
	var said warnings
	f := newFamily(said.warn)
	f.procs[10], f.nprocs = true, 1 // the first, without a warden
	f.onTask(taskEvent(wire.TaskKindTASKEV_FORK, 10, 11))
	f.onTask(taskEvent(wire.TaskKindTASKEV_FORK, 11, 12))
	f.onTask(taskEvent(wire.TaskKindTASKEV_EXIT, 11, 0))
	f.onTask(taskEvent(wire.TaskKindTASKEV_THREAD, 12, 0))
	f.ended()
	var m rundir.Meta
	f.meta(&m)
	if !f.procs[10] || f.procs[11] || !f.procs[12] || len(f.procs) != 2 {
		t.Errorf("live %v, want 10 and 12", f.procs)
	}
	if m.Family == nil || m.Family.Processes != 3 || !slices.Equal(f.forked, []int{11, 12}) {
		t.Errorf("family %+v, forked %v; want 3 processes, 11 and 12 forked", m.Family, f.forked)
	}
	if m.Pauses != nil || len(said) != 0 {
		t.Errorf("pauses %+v, warnings %q: never held", m.Pauses, said)
	}
}

func TestFamilyInterruptedWhileProcessesRunNamesThem(t *testing.T) {
	var said warnings
	f := newFamily(said.warn)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f.await(ctx, func() ([]int, error) { return []int{42, 7}, nil })
	var m rundir.Meta
	f.meta(&m)
	if m.Family == nil || !slices.Equal(m.Family.LeftRunning, []int{7, 42}) || len(said) != 1 || !strings.Contains(said[0], "2 processes of the command still ran ([7 42])") {
		t.Fatalf("family %+v, warnings %q", m.Family, said)
	}
	// meta hands out copies: the family's own record is not the caller's.
	m.Family.LeftRunning[0] = 1
	var again rundir.Meta
	f.meta(&again)
	if again.Family.LeftRunning[0] != 7 {
		t.Error("meta shares the family's slice")
	}
}

func TestFamilyAwaitEndsWhenNoTracedProcessIsLeftOrTheTracerFails(t *testing.T) {
	var said warnings
	f := newFamily(said.warn)
	polls := 0
	f.await(context.Background(), func() ([]int, error) {
		polls++
		if polls < 3 {
			return []int{5}, nil
		}
		return nil, nil
	})
	f.await(context.Background(), func() ([]int, error) { return nil, errors.New("map gone") })
	var m rundir.Meta
	f.meta(&m)
	if polls != 3 || m.Family != nil || !slices.Equal(said, warnings{"map gone"}) {
		t.Fatalf("%d polls, family %+v, warnings %q", polls, m.Family, said)
	}
}

func TestFamilyContinuesAProcessLeftStoppedWithoutAWarden(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for i := 0; proc.State(pid) != 'T'; i++ {
		if i > 500 {
			t.Fatal("the process did not stop")
		}
		time.Sleep(2 * time.Millisecond)
	}
	var said warnings
	f := newFamily(said.warn)
	f.procs[pid] = true
	if n := f.continueStopped(); n != 1 || len(said) != 1 {
		t.Fatalf("continued %d, warnings %q; want 1", n, said)
	}
	for i := 0; proc.State(pid) == 'T'; i++ {
		if i > 500 {
			t.Fatal("the process stayed stopped")
		}
		time.Sleep(2 * time.Millisecond)
	}
	// A process that is gone is no failure to continue it.
	f.cont(1<<22+1, "for a test")
	if len(said) != 1 {
		t.Errorf("warnings %q", said)
	}
}
