package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/ggml"
	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/wire"
)

// TestRecordBuildWithoutAProbePointSaysWhatIsMissing records the static
// llama-completion with one probe point's symbol removed, as a build
// that inlined or stripped that function has it: what the point records
// is absent, the rest is recorded, and the summary, meta.json, doctor and
// query name the symbol and what is lost instead of leaving a silent
// zero. A symbol made local (in .symtab only, as builds that hide ggml's
// internals have it) is still probed, and doctor says it is local.
func TestRecordBuildWithoutAProbePointSaysWhatIsMissing(t *testing.T) {
	requireBPF(t)
	llmtest.Require(t)
	objcopy, err := exec.LookPath("objcopy")
	if err != nil {
		t.Fatalf("objcopy (binutils, which builds llama.cpp too): %v", err)
	}
	spec := gguf.SynthSpec{Layers: 2, Embd: 256, FF: 256, Heads: 4, Experts: 4, ExpertsUsed: 2, Type: llmtest.WeightType}
	model := llmtest.Model(t, spec)
	tests := []struct {
		name    string
		objcopy string // how the symbol is changed
		sym     string
		events  uint32 // the event type the point records
		missing bool   // the point is gone: its events absent, said so
		warning string
		doctor  string // in doctor's detail of the point
	}{
		{"no get_rows: no expert picks", "--strip-symbol=", ggml.SymGetRows, uint32(wire.EventTypeEV_EXPERTS), true,
			"expert picks are not recorded", "missing from the"},
		{"no graph_compute: no graphs", "--strip-symbol=", ggml.SymGraphCompute, uint32(wire.EventTypeEV_NODE), true,
			"graphs and their nodes", "missing from the"},
		{"get_rows local: still probed", "--localize-symbol=", ggml.SymGetRows, uint32(wire.EventTypeEV_EXPERTS), false,
			"", "local in llama-completion"},
	}
	const n = 4
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "llama-completion")
			if out, err := exec.Command(objcopy, tc.objcopy+tc.sym, llmtest.CLI(t, llmtest.Static, "llama-completion"), bin).CombinedOutput(); err != nil {
				t.Fatalf("objcopy: %v\n%s", err, out)
			}
			// A file written moments before is probed: on the disk first.
			if out, err := exec.Command("sync", bin).CombinedOutput(); err != nil {
				t.Fatalf("sync: %v\n%s", err, out)
			}
			rows, _ := doctorRows(t, "--", bin)
			point := rows["probe point "+tc.sym]
			if (point.Status == "ok") == tc.missing || !strings.Contains(point.Detail, tc.doctor) ||
				(tc.missing && !strings.Contains(point.Detail, tc.warning)) {
				t.Errorf("doctor on %s: %+v, want %q (and what is lost: %q)", tc.sym, point, tc.doctor, tc.warning)
			}
			dir := filepath.Join(t.TempDir(), "run")
			args := append([]string{"record", "-o", dir, "--cold", "--"}, llmtest.CompletionArgs(bin, model, n)...)
			_, summary, err := runCmd(t, args...)
			if err != nil {
				t.Fatalf("record: %v\n%s", err, summary)
			}
			var calls, events int
			spoolEvents(t, dir, func(typ uint16, rec []byte) {
				switch uint32(typ) {
				case uint32(wire.EventTypeEV_DECODE_BEGIN):
					calls++
				case tc.events:
					events++
				}
			})
			if calls != n {
				t.Errorf("recorded %d llama_decode calls, llama-completion -n %d made %d", calls, n, n)
			}
			if (events == 0) != tc.missing {
				t.Errorf("%d events of type %d recorded with %s%s", events, tc.events, tc.objcopy, tc.sym)
			}
			m, err := rundir.ReadMeta(dir)
			if err != nil {
				t.Fatal(err)
			}
			said := func(ws []string) bool {
				for _, w := range ws {
					if strings.Contains(w, tc.sym+" is in none of the files searched ("+bin) && strings.Contains(w, tc.warning) {
						return true
					}
				}
				return false
			}
			if said(m.Warnings) != tc.missing {
				t.Errorf("meta.json says %s is missing: %v, want %v:\n%s", tc.sym, said(m.Warnings), tc.missing, strings.Join(m.Warnings, "\n"))
			}
			if said(strings.Split(summary, "\n")) != tc.missing {
				t.Errorf("the record summary says %s is missing: %v, want %v:\n%s", tc.sym, !tc.missing, tc.missing, summary)
			}
			if tc.sym != ggml.SymGetRows {
				return
			}
			// query --by expert: a count where picks were probed, NA where not.
			qrows, errOut := jsonOut(t, "query", "-i", dir, "--by", "expert")
			if len(qrows) == 0 {
				t.Fatal("query --by expert printed no row")
			}
			var selected uint64
			for _, r := range qrows {
				if v, ok := jsonUint(t, r["selected"]); ok {
					selected += v
				} else if !tc.missing {
					t.Errorf("expert %v: selected %v with get_rows probed", r["expert"], r["selected"])
				}
			}
			if want := uint64((n - 1) * spec.Layers * spec.ExpertsUsed); !tc.missing && selected < want {
				t.Errorf("selected %v in all, want at least the decode picks %v", selected, want)
			}
			if tc.missing && (selected != 0 || !strings.Contains(errOut, "selected left out (--all-columns keeps them, NA)")) {
				t.Errorf("selected %v without get_rows, stderr %q: want NA and a note", selected, errOut)
			}
		})
	}
}
