package store

import (
	"testing"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/iocorr/iocorr/event"
)

// BenchmarkWriteKeyPerEvent measures the design ADR-001 rejected: one
// badger key per event (time | seq → the event) plus its five index keys
// (tensor, layer, expert, token, op → ∅), written with a WriteBatch and
// the same bulk options. Only the writes are timed: no spool, no
// attribution. Compare BenchmarkIngest, which does all of it.
//
// It runs on 200k events: at 1M it takes a minute (and gets slower per
// event as the LSM grows; see the ADR for the numbers).
func BenchmarkWriteKeyPerEvent(b *testing.B) {
	n := 200_000
	if testing.Short() {
		n = 50_000
	}
	evs := make([]event.Event, n)
	for i := range evs {
		evs[i] = event.Event{Ts: uint64(i) * 1000, Tensor: uint32(3 + i%8), Token: uint32(i / 1000), Expert: int16(i%8) - 1,
			Kind: event.KindFault, Bytes: 4096, Offset: int64(i) * 4096, Dur: 500, Trigger: event.NoTensor}
	}
	b.ResetTimer()
	for b.Loop() {
		path := b.TempDir()
		db, err := badger.Open(bulkOptions(path))
		if err != nil {
			b.Fatal(err)
		}
		wb := db.NewWriteBatch()
		for i := range evs {
			e := &evs[i]
			k := chunkKey(e.Ts, uint32(i))
			if err := wb.Set(k, appendChunk(nil, evs[i:i+1])); err != nil {
				b.Fatal(err)
			}
			for j, v := range chunkIndexValues(e, 0) {
				if err := wb.Set(chunkIndexes[j].key(nil, v, k), nil); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := wb.Flush(); err != nil {
			b.Fatal(err)
		}
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
