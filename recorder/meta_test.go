package recorder

import (
	"io"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iocorr/iocorr/rundir"
)

// A burst of changes costs at most two writes (one at once, if the last
// write is an interval old, and one for the rest), and the last change
// is on disk once the interval has passed: folded, never lost.
func TestMetaChangesInABurstAreFoldedIntoOneWriteAndTheLastIsKept(t *testing.T) {
	dir := t.TempDir()
	var writes, version atomic.Int64
	w := newMetaWriter(dir, func() rundir.Meta {
		writes.Add(1)
		return rundir.Meta{Command: []string{"v", string(rune('0' + version.Load()))}}
	}, func(err error) { t.Error(err) })
	w.start()
	defer w.stop()
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for start := time.Now(); !ok(); time.Sleep(5 * time.Millisecond) {
			if time.Since(start) > 5*time.Second {
				t.Fatalf("%s: not within 5 s (%d writes)", what, writes.Load())
			}
		}
	}
	w.changed()
	waitFor("the first change written at once", func() bool { return writes.Load() == 1 })
	version.Store(1)
	for range 10 {
		w.changed()
	}
	onDisk := func() string {
		m, err := rundir.ReadMeta(dir)
		if err != nil || len(m.Command) != 2 {
			return ""
		}
		return m.Command[1]
	}
	waitFor("the burst's last change written", func() bool { return onDisk() == "1" })
	time.Sleep(2 * metaMinInterval)
	if n := writes.Load() - 1; n < 1 || n > 2 {
		t.Errorf("%d writes for a burst of 10 changes, want 1 or 2", n)
	}
}

func TestRunMetaKeepsItsWarningsAndSaysThem(t *testing.T) {
	var said strings.Builder
	rm := &runMeta{dir: t.TempDir(), stderr: &said}
	rm.warn("the ring was full")
	rm.update(func(m *rundir.Meta) { m.Command = []string{"llama-cli"} })
	rm.mu.Lock()
	m := rm.copyLocked()
	rm.mu.Unlock()
	if !rm.warned("ring was full") || rm.warned("disk") || said.String() != "iocorr: warning: the ring was full\n" {
		t.Errorf("warned %v, said %q", rm.warned("ring was full"), said.String())
	}
	if !slices.Equal(m.Warnings, []string{"the ring was full"}) || !slices.Equal(m.Command, []string{"llama-cli"}) {
		t.Errorf("metadata %+v", m)
	}
}

// The first metadata is on disk at once, with space held back beside it;
// the last goes there with the space given back first.
func TestRunMetaHoldsSpaceBackForItsLastWrite(t *testing.T) {
	dir := t.TempDir()
	rm := &runMeta{dir: dir, stderr: io.Discard}
	if err := rm.open(func() rundir.Meta { return rundir.Meta{Command: []string{"first"}} }); err != nil {
		t.Fatal(err)
	}
	if rm.reserve == "" {
		t.Fatal("no space held back")
	}
	if _, err := os.Stat(rm.reserve); err != nil {
		t.Fatal(err)
	}
	if m, err := rundir.ReadMeta(dir); err != nil || m.Command[0] != "first" {
		t.Fatalf("first metadata %+v, %v", m, err)
	}
	reserve := rm.reserve
	rm.final(rundir.Meta{Command: []string{"last"}, Finished: true})
	if _, err := os.Stat(reserve); !os.IsNotExist(err) {
		t.Errorf("the reserve is still there: %v", err)
	}
	if m, err := rundir.ReadMeta(dir); err != nil || m.Command[0] != "last" || !m.Finished || rm.m.Command[0] != "last" {
		t.Fatalf("last metadata %+v, %v", m, err)
	}
}
