package main

import (
	"encoding/csv"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/rundir"
)

// writeTinyRun writes a run of a two-tensor model with three tokens and a
// fault plus a page add on each tensor per token.
func writeTinyRun(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	meta := &rundir.Meta{Lost: map[string]uint64{}, Models: []rundir.ModelFile{{
		Path: "m.gguf", Dev: 5, Ino: 9, Size: 3 * 4096,
		Tensors: []rundir.Tensor{
			{Name: "blk.0.ffn_down.weight", Offset: 4096, Size: 4096, Layer: 0, Role: "ffn_down"},
			{Name: "blk.1.ffn_down.weight", Offset: 8192, Size: 4096, Layer: 1, Role: "ffn_down"},
		}}}}
	if err := rundir.WriteMeta(dir, meta); err != nil {
		t.Fatal(err)
	}
	sp, err := ingest.CreateSpool(filepath.Join(dir, rundir.SpoolFile))
	if err != nil {
		t.Fatal(err)
	}
	ts := uint64(100)
	for tok := uint32(1); tok <= 3; tok++ {
		for _, off := range []uint64{4096, 8192} {
			h := bpf.IocorrEventHdr{Ts: ts, Tid: 1, Token: tok, Phase: 2, Type: uint16(bpf.IocorrEventTypeEV_FAULT)}
			sp.Write(ingest.Bytes(&bpf.IocorrFaultEvent{Hdr: h, StartTs: ts - 10, Dev: 5, Ino: 9, FileOff: off, Class: 1}))
			h.Type = uint16(bpf.IocorrEventTypeEV_PAGE_ADD)
			h.Tid = 2
			sp.Write(ingest.Bytes(&bpf.IocorrPageEvent{Hdr: h, Dev: 5, Ino: 9, Index: off / 4096}))
			ts += 100
		}
	}
	if err := sp.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCmd(t, "ingest", dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestQueryTensorPrintsOneRowPerToken(t *testing.T) {
	dir := writeTinyRun(t)
	out, _, err := runCmd(t, "query", "-i", dir, "--tensor", "blk.*.ffn_down.weight", "--format", "csv")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 || rows[0][0] != "token" {
		t.Fatalf("got %q, want a header and 3 token rows", rows)
	}
	for _, r := range rows[1:] {
		if r[1] != "decode" || r[2] != "2" || r[3] != "2" {
			t.Errorf("row %q, want decode with 2 major faults", r)
		}
	}
}

func TestQueryUnknownTensorSuggestsClosestNames(t *testing.T) {
	dir := writeTinyRun(t)
	_, _, err := runCmd(t, "query", "-i", dir, "--tensor", "blk.0.ffn_dwn.weight")
	if err == nil || !strings.Contains(err.Error(), "closest: blk.0.ffn_down.weight") {
		t.Fatalf("got %v, want the closest name", err)
	}
}

func TestExportFaultsPerTokenSumsToTheTensorRows(t *testing.T) {
	dir := writeTinyRun(t)
	sum := func(args ...string) (n int) {
		out, _, err := runCmd(t, append([]string{"export", "-i", dir}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		col := -1
		for i, c := range rows[0] {
			if c == "faults" {
				col = i
			}
		}
		for _, r := range rows[1:] {
			v, _ := strconv.Atoi(r[col])
			n += v
		}
		return n
	}
	if a, b := sum("faults-per-token"), sum("faults-per-token-tensor"); a != 6 || b != 6 {
		t.Errorf("faults per token sum %d, per token-tensor %d, want 6", a, b)
	}
	out, _, err := runCmd(t, "export", "-i", dir, "events")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, "\n"); n != 13 {
		t.Errorf("events export has %d lines, want a header and 12 events", n)
	}
}

func TestExportRejectsUnknownKindsAndFormats(t *testing.T) {
	dir := writeTinyRun(t)
	for _, args := range [][]string{{"bogus"}, {"events", "--format", "json"}, {}} {
		if _, _, err := runCmd(t, append([]string{"export", "-i", dir}, args...)...); err == nil {
			t.Errorf("export %q: want a usage error", args)
		}
	}
}
