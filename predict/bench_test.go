package predict

import (
	"context"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/iocorr/iocorr/pipeline"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/storetest"
)

// BenchmarkPredict1MRecords is `iocorr predict` of four budgets over a
// 1 M-record run (testkit/storetest's synthetic one, ingested once): the
// store read (tokens, aggregates, picks, every event for the waits) and
// the simulations. The synthetic run has no router picks and no
// snapshots, so the benchmark gives it an empty stream of experts and
// 16 MiB of non-file memory: what it times is the reading, which grows
// with records, and the simulations, which grow with the model's pages
// and calls. peak-heap-MiB is the largest heap in use seen while it ran.
func BenchmarkPredict1MRecords(b *testing.B) {
	dir := b.TempDir()
	storetest.WriteSynthRun(b, dir, 1_000_000, 64, storetest.SmallShape)
	if _, err := pipeline.Ingest(context.Background(), dir, pipeline.Options{}); err != nil {
		b.Fatal(err)
	}
	run := storetest.OpenRun(b, dir)
	meta := run.Meta
	meta.Controls.MemLimit = 64 << 20
	peak := watchHeap()
	b.ResetTimer()
	for b.Loop() {
		r, err := Load(run, []rundir.Snapshot{})
		if err != nil {
			b.Fatal(err)
		}
		r.noFigures, r.picksNA, r.NonFile = "", "", 16<<20
		if _, err := Predict(r, Options{Budgets: []int64{20 << 20, 24 << 20, 28 << 20, 32 << 20}}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(peak())/(1<<20), "peak-heap-MiB")
}

// watchHeap samples the heap in use every millisecond until the func it
// returns is called; that returns the largest sample.
func watchHeap() func() uint64 {
	done, stopped := make(chan struct{}), make(chan struct{})
	var peak uint64
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	go func() {
		defer close(stopped)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				metrics.Read(sample)
				peak = max(peak, sample[0].Value.Uint64())
			}
		}
	}()
	return func() uint64 {
		close(done)
		<-stopped
		return peak
	}
}
