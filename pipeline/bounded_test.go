package pipeline_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/iocorr/iocorr/correlate"
	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/pipeline"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/storetest"
	"github.com/iocorr/iocorr/wire"
)

// longSpool is a run of tokens tokens on storetest's synthetic MoE model:
// per token a decode call, faults and page adds across the model, block
// reads, and late records stamped with earlier tokens (a block request
// completing lateBy tokens after it was issued, a page add of the token
// before), which arrive after those tokens' rows were handed over.
func longSpool(tokens, perToken, lateBy int, size uint64) (recs [][]byte, faults, readBytes uint64) {
	ts := uint64(1000)
	for tok := 1; tok <= tokens; tok++ {
		h := wire.EventHdr{Ts: ts, Tid: 10, Tgid: 10, Token: uint32(tok), Phase: 2}
		d := wire.DecodeEvent{Hdr: h, BeginTs: ts, N_tokens: 1}
		d.Hdr.Type = uint16(wire.EventTypeEV_DECODE_BEGIN)
		recs = append(recs, ingest.Bytes(&d))
		for i := range perToken {
			ts += 1000
			h.Ts = ts
			off := (uint64(tok*perToken+i) * 40961) % size &^ 4095
			switch i % 4 {
			case 0, 1:
				h.Type = uint16(wire.EventTypeEV_FAULT)
				recs = append(recs, ingest.Bytes(&wire.FaultEvent{Hdr: h, StartTs: ts - 500, Ino: storetest.SynIno,
					Dev: storetest.SynDev, FileOff: off, Class: uint8(i % 2)})) // minor, major
				faults++
			case 2:
				h.Type = uint16(wire.EventTypeEV_PAGE_ADD)
				recs = append(recs, ingest.Bytes(&wire.PageEvent{Hdr: h, Ino: storetest.SynIno, Dev: storetest.SynDev, Index: off / 4096}))
			case 3:
				h.Type = uint16(wire.EventTypeEV_BLOCK)
				recs = append(recs, ingest.Bytes(&wire.BlockEvent{Hdr: h, IssueTs: ts - 300,
					Sector: (storetest.SynPart*512 + 1<<30 + off) / 512, Dev: storetest.SynDisk, Bytes: 4096}))
				readBytes += 4096
			}
		}
		if tok > lateBy {
			ts += 1000
			late := wire.EventHdr{Ts: ts, Tid: 11, Tgid: 10, Token: uint32(tok - lateBy), Phase: 2,
				Type: uint16(wire.EventTypeEV_BLOCK)}
			off := uint64(tok%7) * storetest.SynExpert * 3
			recs = append(recs, ingest.Bytes(&wire.BlockEvent{Hdr: late, IssueTs: ts - 300,
				Sector: (storetest.SynPart*512 + 1<<30 + off) / 512, Dev: storetest.SynDisk, Bytes: 8192}))
			readBytes += 8192
			late.Token, late.Type, late.Tid = uint32(tok-1), uint16(wire.EventTypeEV_PAGE_ADD), 12
			recs = append(recs, ingest.Bytes(&wire.PageEvent{Hdr: late, Ino: storetest.SynIno, Dev: storetest.SynDev, Index: off / 4096}))
		}
		ts += 1000
	}
	return recs, faults, readBytes
}

func TestALongIngestHoldsAFewTokensAndStoresWhatHoldingThemAllWould(t *testing.T) {
	const tokens = 400
	meta := storetest.SynthMeta(storetest.SmallShape)
	meta.Complete, meta.Finished = true, true
	recs, faults, readBytes := longSpool(tokens, 120, 5, uint64(meta.Models[0].Size))

	// The oracle: the correlator without an aggregate sink holds every
	// row until Finish, as every ingest did before rows were handed over.
	whole, err := correlate.New(meta, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err := whole.Attribute(recs)
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	if err := rundir.WriteMeta(dir, meta); err != nil {
		t.Fatal(err)
	}
	if err := ingest.WriteSpool(filepath.Join(dir, rundir.SpoolFile), recs); err != nil {
		t.Fatal(err)
	}
	sum, err := pipeline.Ingest(context.Background(), dir, pipeline.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.AggRows != len(want.Aggs) || sum.Tokens != tokens {
		t.Errorf("store has %d rows of %d tokens, the whole correlator %d of %d", sum.AggRows, sum.Tokens, len(want.Aggs), tokens)
	}
	// Held: the newest token, the one before, and the few earlier ones a
	// late record reopened — never the run.
	if sum.HeldTokensPeak == 0 || sum.HeldTokensPeak > 4 {
		t.Errorf("correlator held up to %d tokens at once, want 1 to 4 of %d", sum.HeldTokensPeak, tokens)
	}
	if sum.HeldAggsPeak == 0 || sum.HeldAggsPeak*40 > uint64(len(want.Aggs)) {
		t.Errorf("correlator held up to %d of the run's %d rows at once, want under 1/40", sum.HeldAggsPeak, len(want.Aggs))
	}

	st := storetest.Open(t, dir)
	got := map[event.AggKey]event.Counters{}
	var tot event.Counters
	for id := range st.Tensors {
		if err := st.AggsOfTensor(uint32(id), func(a *event.Agg) error {
			if _, dup := got[a.AggKey]; dup {
				t.Errorf("row %+v stored twice", a.AggKey)
			}
			got[a.AggKey] = a.Counters
			tot.Add(&a.Counters)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range want.Aggs {
		if got[a.AggKey] != a.Counters {
			t.Errorf("row %+v: store %+v, whole correlator %+v", a.AggKey, got[a.AggKey], a.Counters)
		}
	}
	// An oracle independent of the correlator: what the spool holds.
	if tot.Faults != faults || tot.ReadBytes != readBytes {
		t.Errorf("store totals: %d faults, %d bytes read; the spool has %d, %d", tot.Faults, tot.ReadBytes, faults, readBytes)
	}
	toks, err := st.Tokens()
	if err != nil {
		t.Fatal(err)
	}
	if len(toks) != len(want.Tokens) {
		t.Fatalf("store has %d tokens, whole correlator %d", len(toks), len(want.Tokens))
	}
	for i := range toks {
		if toks[i] != want.Tokens[i] {
			t.Errorf("token %+v, whole correlator %+v", toks[i], want.Tokens[i])
		}
	}
}
