package main

import (
	"os"
	"slices"
	"testing"

	"github.com/iocorr/iocorr/index"
	"github.com/iocorr/iocorr/internal/llmtest"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/stats"
)

// The recorder's residency snapshots (mincore of its own mapping, taken
// soon after each token's start) against the page cache's history that
// the pagecache tier's tracepoints replay. The replay is exact at token
// starts (the kernel flushes its coalesced runs there), and a page's event
// stamped between two starts happened between them; so every page with no
// event from its token's start until the first token start after the
// snapshot ended kept one state throughout, and the snapshot must show it.
// Pages with events in that window are uncertain, and counted: they bound
// how far a snapshot taken after the start is from the start itself.
func TestResidencySnapshotsEqualThePageCacheReplay(t *testing.T) {
	requireBPF(t)
	llmtest.Require(t)
	dir := llmtest.RecordedMoE(t).Dir
	meta, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := rundir.ReadSnapshots(dir)
	if err != nil {
		t.Fatal(err)
	}
	if rs := meta.ResidencySnapshots; rs == nil || rs.Taken != uint64(len(snaps)) || len(snaps) == 0 {
		t.Fatalf("meta.json says %+v of the snapshots, the file holds %d", rs, len(snaps))
	}
	st, err := index.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tokens, err := st.Tokens()
	if err != nil {
		t.Fatal(err)
	}
	// The replay's exact points: every token start, and the run's end.
	var marks []uint64
	for _, tk := range tokens {
		if tk.StartNS != 0 {
			marks = append(marks, tk.StartNS)
		}
	}
	marks = append(marks, meta.MonoEndNS)
	slices.Sort(marks)
	marks = slices.Compact(marks)
	states, changed, err := stats.PageStates(st, meta, marks)
	if err != nil {
		t.Fatal(err)
	}
	var compared, uncertain, pages int
	var lags []uint64
	for _, s := range snaps {
		from, found := slices.BinarySearch(marks, s.MarkNS)
		if !found {
			t.Errorf("token %d: snapshot for a start at %d the store does not have", s.Token, s.MarkNS)
			continue
		}
		to, _ := slices.BinarySearch(marks, s.EndNS)
		if to == len(marks) {
			to--
		}
		lags = append(lags, s.LagNS())
		for m, pm := range s.Models {
			if pm == nil {
				t.Errorf("token %d: model %d has no snapshot", s.Token, m)
				continue
			}
			mismatched := 0
			// The header is read before the model is known to the kernel
			// side (its adds are not in the replay); the tensor data after.
			data := int(meta.Models[m].DataOffset / int64(os.Getpagesize()))
			for p, want := range states[from][m] {
				if p < data {
					continue
				}
				pages++
				moved := false
				for w := from + 1; w <= to && !moved; w++ {
					moved = changed[w][m][p]
				}
				if moved {
					uncertain++
					continue
				}
				compared++
				if got := pm.Has(int64(p)); got != want {
					if mismatched++; mismatched <= 5 {
						t.Errorf("token %d: page %d of model %d resident %v in the snapshot, %v in the replay from the token's start to after the snapshot", s.Token, p, m, got, want)
					}
				}
			}
			if mismatched > 5 {
				t.Errorf("token %d: %d pages differ", s.Token, mismatched)
			}
		}
	}
	if compared == 0 {
		t.Fatal("no page kept its state over a snapshot: the test compared nothing")
	}
	slices.Sort(lags)
	t.Logf("%d snapshots: %d page states equal to the replay, %d uncertain (an event between the token's start and the snapshot's end; %.1f%%); snapshot lag after the token's start: median %.1f ms, max %.1f ms",
		len(snaps), compared, uncertain, 100*float64(uncertain)/float64(pages), float64(lags[len(lags)/2])/1e6, float64(lags[len(lags)-1])/1e6)
}
