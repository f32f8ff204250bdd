package recorder

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/testenv"
)

func TestRecordIngestsARunAfterItsSummaryUnlessToldNot(t *testing.T) {
	testenv.RequireBPF(t)
	for _, noIngest := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "run")
		o := options(dir, "true")
		o.NoIngest = noIngest
		summaries := 0
		o.Recorded = func(res *Result) {
			summaries++
			// The summary comes before the store's wait.
			if _, err := os.Stat(filepath.Join(dir, rundir.DBDir)); err == nil || !res.Ran || !res.Meta.Finished {
				t.Errorf("no ingest %v: at the summary the store exists (%v) or the run is not finished (%+v)", noIngest, err, res.Meta.Finished)
			}
		}
		rec, err := Record(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		_, serr := os.Stat(filepath.Join(dir, rundir.DBDir))
		if summaries != 1 || rec.Ingested == noIngest || (serr == nil) == noIngest || rec.Store.AlreadyBuilt {
			t.Errorf("no ingest %v: %d summaries, ingested %v, store %v, summary %+v", noIngest, summaries, rec.Ingested, serr, rec.Store)
		}
	}
}

func TestRecordOfACommandThatNeverRanNeitherSumsUpNorIngests(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	o := options(dir, "no-such-command-iocorr")
	o.Recorded = func(*Result) { t.Error("a summary of a command that never ran") }
	rec, err := Record(context.Background(), o)
	if err == nil || rec.Ran || rec.Ingested {
		t.Fatalf("err %v, ran %v, ingested %v", err, rec.Ran, rec.Ingested)
	}
}
