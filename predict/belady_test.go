package predict

import (
	"math/rand/v2"
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/stats"
)

// beladyOfSequence is the bound the plain way, as the oracle: the whole
// page sequence written out and given to stats.Belady (the study's
// expert-cache simulation), faults counted per run of missing pages of
// one read.
func beladyOfSequence(r *Run, capacity int64) phaseCounts {
	var seq []int
	var phase []uint8
	var first []bool
	load := r.load()
	for p := load.first; p < load.end; p++ {
		seq, phase, first = append(seq, int(p)), append(phase, 255), append(first, false)
	}
	for _, cl := range r.calls {
		for _, rg := range cl.reads {
			for p := rg.first; p < rg.end; p++ {
				seq, phase, first = append(seq, int(p)), append(phase, cl.phase), append(first, p == rg.first)
			}
		}
	}
	hits := stats.Belady(seq, int(capacity))
	out := newCounts()
	for i := range seq {
		if phase[i] == 255 || hits[i] {
			continue
		}
		out[phase[i]][0] += pageSize
		if first[i] || hits[i-1] {
			out[phase[i]][1]++
		}
	}
	return out
}

func TestBeladyWithoutTheSequenceReadsWhatTheSequenceSays(t *testing.T) {
	rng := rand.New(rand.NewPCG(30, 14))
	for trial := range 40 {
		pages := int32(50 + rng.IntN(400))
		r := &Run{pages: pages, loaded: trial%2 == 0}
		r.Model.Size = int64(pages) * pageSize
		r.Model.DataOffset = int64(rng.IntN(3)) * pageSize
		// Ranges that overlap (tensors sharing a page, expert slices of
		// one tensor), some read in every call, some in a few.
		var pool []pageRange
		for range 5 + rng.IntN(20) {
			a := int32(rng.IntN(int(pages)))
			pool = append(pool, pageRange{a, min(a+1+int32(rng.IntN(40)), pages)})
		}
		for c := range 2 + rng.IntN(6) {
			cl := call{phase: event.PhaseDecode}
			if c == 0 {
				cl.phase = event.PhasePrefill
			}
			for _, rg := range pool {
				if rng.IntN(3) > 0 {
					cl.reads = append(cl.reads, rg)
				}
			}
			r.calls = append(r.calls, cl)
		}
		for _, capacity := range []int64{1, 7, int64(pages) / 4, int64(pages) / 2, int64(pages)} {
			got, want := r.belady(capacity), beladyOfSequence(r, capacity)
			for _, ph := range []uint8{event.PhasePrefill, event.PhaseDecode} {
				if *got[ph] != *want[ph] {
					t.Fatalf("trial %d, %d pages in %d: %s read %d bytes in %d faults, the sequence's bound %d in %d",
						trial, capacity, pages, event.PhaseName(ph), got[ph][0], got[ph][1], want[ph][0], want[ph][1])
				}
			}
		}
	}
}
