package correlate

import (
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/wire"
)

// A thread's faults outside the model files, as the kernel writes them
// one by one (--probe faults) and as it counts them: the two spools must
// charge every aggregate row and token the same.
func TestAFaultCountChargesWhatItsFaultRecordsWould(t *testing.T) {
	type f struct {
		ts, start uint64
		tid       uint32
		token     uint32
		ino       uint64 // 0: anonymous
		class     uint8
	}
	const otherIno = 555
	faults := []f{
		{100, 90, 7, 1, 0, event.ClassMinor},
		{120, 100, 7, 1, 0, event.ClassMinor},
		{130, 125, 7, 1, otherIno, event.ClassMajor},
		{140, 0, 7, 1, 0, event.ClassUnaccounted},
		{150, 148, 8, 1, 0, event.ClassMinor},
		{300, 290, 7, 2, 0, event.ClassMinor},
		{310, 301, 7, 2, otherIno, event.ClassMinor},
	}
	var oneByOne, counted [][]byte
	type key struct {
		tid, token uint32
		class      uint8
		where      uint8
	}
	counts := map[key]*wire.FaultCountEvent{}
	var order []key
	for _, x := range faults {
		fe := wire.FaultEvent{Hdr: hdr(wire.EventTypeEV_FAULT, x.ts, x.tid, x.token), StartTs: x.start, Ino: x.ino, Class: x.class, Addr: 0x9000}
		if x.ino != 0 {
			fe.Dev = modelDev
		}
		oneByOne = append(oneByOne, ingest.Bytes(&fe))
		where := uint8(wire.FaultWhereFAULT_WHERE_ANON)
		if x.ino != 0 {
			where = uint8(wire.FaultWhereFAULT_WHERE_OTHER)
		}
		k := key{x.tid, x.token, x.class, where}
		c := counts[k]
		if c == nil {
			c = &wire.FaultCountEvent{Hdr: hdr(wire.EventTypeEV_FAULT_COUNT, x.ts, x.tid, x.token), FirstTs: x.ts, Class: x.class, Where: where}
			counts[k] = c
			order = append(order, k)
		}
		c.Hdr.Ts = x.ts
		c.Count++
		if x.class != event.ClassUnaccounted {
			c.StallNs += x.ts - x.start
		}
	}
	// A model fault between, recorded in both: the counts come at the end.
	model := fault(200, 180, 7, modelIno, 4096, event.ClassMajor)
	oneByOne = append(oneByOne, model)
	counted = append(counted, model)
	for _, k := range order {
		counted = append(counted, ingest.Bytes(counts[k]))
	}

	want, _ := run(t, oneByOne...)
	got, evs := run(t, counted...)
	for _, tensor := range []uint32{event.TensorAnon, event.TensorOther, idQ} {
		if g, w := aggOf(got, tensor, -1), aggOf(want, tensor, -1); g != w {
			t.Errorf("tensor %d: counted %+v, one by one %+v", tensor, g, w)
		}
	}
	if len(got.Tokens) != len(want.Tokens) {
		t.Fatalf("tokens %+v, want %+v", got.Tokens, want.Tokens)
	}
	for i := range got.Tokens {
		if got.Tokens[i].Counters != want.Tokens[i].Counters {
			t.Errorf("token %d: counted %+v, one by one %+v", got.Tokens[i].Token, got.Tokens[i].Counters, want.Tokens[i].Counters)
		}
	}
	if got.Stats.FaultsCounted != uint64(len(faults)) {
		t.Errorf("%d faults counted, want %d", got.Stats.FaultsCounted, len(faults))
	}
	// Only the model's fault is an event: a count has no time of each.
	if len(evs) != 1 || evs[0].Tensor != idQ {
		t.Errorf("events %+v, want the model's fault alone", evs)
	}
	if a := aggOf(got, event.TensorAnon, -1); a.Faults != 4 || a.Unaccounted != 1 || a.StallNS != 10+20+2+10 {
		t.Errorf("[anonymous] %+v", a)
	}
}

func TestAFaultCountOfAPlaceItDoesNotKnowIsNotCharged(t *testing.T) {
	c := wire.FaultCountEvent{Hdr: hdr(wire.EventTypeEV_FAULT_COUNT, 10, 7, 1), Count: 5, StallNs: 50, Where: uint8(wire.FaultWhereFAULT_WHERE_MODEL)}
	res, _ := run(t, ingest.Bytes(&c))
	for _, a := range res.Aggs {
		if a.Faults != 0 {
			t.Errorf("a count said to be a model's was charged: %+v", a)
		}
	}
	if res.Stats.Unattributed != 1 || res.Stats.FaultsCounted != 0 {
		t.Errorf("stats %+v, want the record unattributed", res.Stats)
	}
}

// A fault's wait and time preempted are charged beside its stall, never
// more than it together: a fault with no stall (no start, or never
// completed) has neither, and the kernel's counts carry their sums as
// records would.
func TestAFaultsWaitAndTimePreemptedAreChargedWithinItsStall(t *testing.T) {
	withParts := func(ts, start uint64, class uint8, wait, preempted uint64) []byte {
		return ingest.Bytes(&wire.FaultEvent{Hdr: hdr(wire.EventTypeEV_FAULT, ts, 7, 1), StartTs: start, Ino: modelIno, FileOff: 4096, Dev: modelDev, Class: class, Addr: 0x7000,
			WaitNs: wait, PreemptedNs: preempted})
	}
	for _, tc := range []struct {
		name                   string
		rec                    []byte
		tensor                 uint32
		stall, wait, preempted uint64
	}{
		{"a major fault that slept part of its stall", withParts(400, 300, event.ClassMajor, 60, 0), idQ, 100, 60, 0},
		{"a major fault that slept and was preempted", withParts(400, 300, event.ClassMajor, 60, 25), idQ, 100, 60, 25},
		{"a wait past the stall is the stall", withParts(400, 300, event.ClassMajor, 150, 10), idQ, 100, 100, 0},
		{"the time preempted is at most what the wait leaves", withParts(400, 300, event.ClassMajor, 70, 40), idQ, 100, 70, 30},
		{"a fault without its start has neither", withParts(400, 0, event.ClassMajor, 50, 5), idQ, 0, 0, 0},
		{"an unaccounted fault has neither", withParts(400, 300, event.ClassUnaccounted, 80, 5), idQ, 0, 0, 0},
		{"a count of anonymous faults", ingest.Bytes(&wire.FaultCountEvent{Hdr: hdr(wire.EventTypeEV_FAULT_COUNT, 400, 7, 1), Count: 3, StallNs: 50, WaitNs: 30, PreemptedNs: 15,
			Class: event.ClassMinor, Where: uint8(wire.FaultWhereFAULT_WHERE_ANON)}), event.TensorAnon, 50, 30, 15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, _ := run(t, tc.rec)
			if a := aggOf(res, tc.tensor, -1); a.StallNS != tc.stall || a.WaitNS != tc.wait || a.PreemptedNS != tc.preempted {
				t.Errorf("stall %d, wait %d, preempted %d; want %d, %d, %d", a.StallNS, a.WaitNS, a.PreemptedNS, tc.stall, tc.wait, tc.preempted)
			}
			if tok := res.Tokens[0]; tok.WaitNS != tc.wait || tok.PreemptedNS != tc.preempted {
				t.Errorf("the token's wait %d, preempted %d; want %d, %d", tok.WaitNS, tok.PreemptedNS, tc.wait, tc.preempted)
			}
		})
	}
}
