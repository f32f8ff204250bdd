package recorder

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/wire"
)

// stopsAt is a tracer whose kernel stopped every process at token token.
type stopsAt struct {
	token     uint32
	armed     int
	keepsRuns bool
	flushes   int
}

func (s *stopsAt) TokenStops(uint32) (uint64, uint32, error) { return 1, s.token, nil }
func (s *stopsAt) ArmTokenWakeup() error                     { s.armed++; return nil }
func (s *stopsAt) KeepsPageRuns() bool                       { return s.keepsRuns }
func (s *stopsAt) FlushPageRuns() error                      { s.flushes++; return nil }

func tokenStart(token, tgid uint32, ts uint64) *wire.DecodeEvent {
	e := &wire.DecodeEvent{BeginTs: ts}
	e.Hdr.Type, e.Hdr.Token, e.Hdr.Tgid, e.Hdr.Ts = uint16(wire.EventTypeEV_DECODE_BEGIN), token, tgid, ts
	return e
}

// residentModel is a file of pages written through the page cache, so
// resident, as a model the recording knows.
func residentModel(t *testing.T, pages int) *models {
	t.Helper()
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := os.WriteFile(path, make([]byte, pages*kernel.PageSize), 0o644); err != nil {
		t.Fatal(err)
	}
	ms := newModels(func(string) {}, nil)
	ms.list = append(ms.list, &rundir.ModelFile{Path: path, Size: int64(pages * kernel.PageSize), Pages: int64(pages)})
	return ms
}

func TestSnapshotsAtATokenStartSayEachModelsResidentPages(t *testing.T) {
	dir := t.TempDir()
	tr := &stopsAt{}
	var said warnings
	s, err := startSnapshots(dir, residentModel(t, 16), said.warn, tr, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.mark(tokenStart(3, 100, 12345))
	// A decode call's end is no token start.
	end := tokenStart(3, 100, 12346)
	end.Hdr.Type = uint16(wire.EventTypeEV_DECODE_END)
	s.mark(end)
	for s.stats.Taken.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	st := s.stop()
	snaps, err := rundir.ReadSnapshots(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Taken != 1 || st.Exact || len(snaps) != 1 || tr.armed == 0 || len(said) != 0 {
		t.Fatalf("stats %+v, %d snapshots, armed %d, warnings %q", st, len(snaps), tr.armed, said)
	}
	sn := snaps[0]
	if sn.Token != 3 || sn.MarkNS != 12345 || sn.Held || len(sn.Models) != 1 || sn.Models[0] == nil || sn.Models[0].Resident != 16 {
		t.Errorf("snapshot %+v (model %+v), want token 3 at 12345, all 16 pages resident", sn, sn.Models)
	}
}

func TestExactSnapshotsResumeEachProcessHeldAtItsTokenStart(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	var resumed []int
	s, err := startSnapshots(dir, residentModel(t, 4), func(string) {}, &stopsAt{token: 7}, true, func(pid int) {
		mu.Lock()
		resumed = append(resumed, pid)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	s.mark(tokenStart(7, 100, 1)) // held at this token: resumed once taken
	s.mark(tokenStart(8, 200, 2)) // its last stop was token 7's: not held
	st := s.stop()
	snaps, err := rundir.ReadSnapshots(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Taken != 2 || !st.Exact || st.NotHeld != 1 || st.Replaced != 0 || st.Throttled != 0 {
		t.Errorf("stats %+v, want 2 taken, exact, 1 not held, none replaced or throttled", st)
	}
	if len(resumed) != 1 || resumed[0] != 100 || len(snaps) != 2 || !snaps[0].Held || snaps[1].Held {
		t.Errorf("resumed %v, snapshots %+v", resumed, snaps)
	}
}

func TestSnapshotsFlushThePendingPageRunsOnlyWhereTheKernelKeepsThem(t *testing.T) {
	for _, tc := range []struct {
		name      string
		keepsRuns bool
	}{
		{"pagecache tier: each snapshot flushes and says when", true},
		{"default tier: no runs, no flush, no flushed_ns", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tr := &stopsAt{token: 7, keepsRuns: tc.keepsRuns}
			s, err := startSnapshots(dir, residentModel(t, 4), func(string) {}, tr, true, func(int) {})
			if err != nil {
				t.Fatal(err)
			}
			s.mark(tokenStart(7, 100, 1))
			s.mark(tokenStart(8, 200, 2))
			s.stop()
			snaps, err := rundir.ReadSnapshots(dir)
			if err != nil {
				t.Fatal(err)
			}
			want := 0
			if tc.keepsRuns {
				want = len(snaps)
			}
			flushed := 0
			for _, sn := range snaps {
				if sn.FlushedNS != 0 {
					if sn.FlushedNS < sn.EndNS {
						t.Errorf("token %d: flushed at %d, before its walk ended at %d", sn.Token, sn.FlushedNS, sn.EndNS)
					}
					flushed++
				}
			}
			if len(snaps) != 2 || tr.flushes != want || flushed != want {
				t.Errorf("%d snapshots, %d flushes, %d with flushed_ns; want 2, %d, %d", len(snaps), tr.flushes, flushed, want, want)
			}
		})
	}
}
