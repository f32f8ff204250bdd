package pipeline_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/pipeline"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/testkit/storetest"
	"github.com/iocorr/iocorr/wire"
)

const (
	pid      = 50
	modelIno = 4242
	mapBase  = 0x7f0000000000
)

var modelDev = kernel.Dev(0xfe, 0)

// writeRun writes a run directory of one model (attn_q at file bytes
// 4096–12287), a maps snapshot of pid in which the model is mapped from
// file byte 0 at mapBase, and a spool of recs.
func writeRun(t *testing.T, recs ...[]byte) string {
	t.Helper()
	dir := t.TempDir()
	meta := &rundir.Meta{
		OpNames: []string{"NONE"},
		Models: []rundir.ModelFile{{Path: "m.gguf", Dev: modelDev, Ino: modelIno, Size: 16384,
			Tensors: []rundir.Tensor{{Name: "blk.0.attn_q.weight", Offset: 4096, Size: 8192, Layer: 0, Role: "attn_q"}}}},
		Maps:     []rundir.MapsSnapshot{{MonoNS: 10, PID: pid, File: "maps/0001-50.txt"}},
		Complete: true,
		Finished: true,
	}
	if err := rundir.WriteMeta(dir, meta); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "maps"), 0o755); err != nil {
		t.Fatal(err)
	}
	maps := "7f0000000000-7f0000004000 r--s 00000000 fe:00 4242                       /models/m.gguf\n"
	if err := os.WriteFile(filepath.Join(dir, "maps", "0001-50.txt"), []byte(maps), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ingest.WriteSpool(filepath.Join(dir, rundir.SpoolFile), recs); err != nil {
		t.Fatal(err)
	}
	return dir
}

// unresolvedFault is a major fault the kernel did not resolve to a file
// (no start, no dev/ino): only the process's mappings can place it.
func unresolvedFault(ts uint64, addr uint64) []byte {
	h := wire.EventHdr{Type: uint16(wire.EventTypeEV_FAULT), Ts: ts, Tgid: pid, Tid: pid, Token: 1, Phase: 2}
	return ingest.Bytes(&wire.FaultEvent{Hdr: h, Addr: addr, Class: 1})
}

func TestIngestAttributesAFaultOnlyTheMapsSnapshotCanPlace(t *testing.T) {
	// File byte 4096+4096 = attn_q's second page; a short record is skipped.
	dir := writeRun(t, unresolvedFault(500, mapBase+8192), []byte{1, 2, 3})
	sum, err := pipeline.Ingest(context.Background(), dir, pipeline.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.FaultsByMaps != 1 || sum.Records != 2 || sum.Short != 1 || sum.Events != 1 {
		t.Errorf("summary %+v, want 2 records (1 short), 1 event, 1 fault resolved by the maps snapshot", sum)
	}
	st := storetest.Open(t, dir)
	var got []event.Event
	if err := st.Events(store.EventFilter{}, func(e *event.Event) error { got = append(got, *e); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Tensor != event.FirstTensor || got[0].Offset != 4096 || got[0].Class != 1 {
		t.Fatalf("stored events %+v, want one major fault at byte 4096 of tensor %d", got, event.FirstTensor)
	}
	var c event.Counters
	if err := st.AggsOfTensor(event.FirstTensor, func(a *event.Agg) error { c.Add(&a.Counters); return nil }); err != nil {
		t.Fatal(err)
	}
	if c.Faults != 1 || c.Major != 1 {
		t.Errorf("attn_q counters %+v, want 1 major fault", c)
	}
}

func TestIngestOfSomethingElseSaysWhatIsMissing(t *testing.T) {
	noSpool := writeRun(t)
	if err := os.Remove(filepath.Join(noSpool, rundir.SpoolFile)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, dir, want string
	}{
		{"a directory that is no run", t.TempDir(), "is not a run directory"},
		{"a run without a spool", noSpool, "run has no event spool"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pipeline.Ingest(context.Background(), tc.dir, pipeline.Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
}
