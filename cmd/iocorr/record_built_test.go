package main

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/correlate"
	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/index"
	"github.com/iocorr/iocorr/internal/llmtest"
	"github.com/iocorr/iocorr/rundir"
)

// TestRecordBuiltCompletionUnderMemoryLimitSeesTokensExpertsAndWeights is
// the design card's own example, `iocorr record --cold --mem-limit … --
// llama-completion -m moe.gguf -p "…" -n N`, on llama.cpp built from the
// source node-llama-cpp ships, once as shared libraries and once as one
// static executable (every probe point inside the executable itself).
//
// llama-completion -n N calls llama_decode N times: once for the prompt,
// one batch that yields the first token, and once per further token
// (internal/llmtest's TestBuiltCompletionGeneratesTokensNonInteractively
// counts that with bpftrace). The prompt is several tokens, so the first
// call is the prefill and the other N-1 decode one token each; in every
// decode token each layer's router picks ExpertsUsed experts.
func TestRecordBuiltCompletionUnderMemoryLimitSeesTokensExpertsAndWeights(t *testing.T) {
	requireBPF(t)
	llmtest.Require(t)
	spec := gguf.SynthSpec{Layers: 8, Embd: 512, FF: 1024, Heads: 8, Experts: 8, ExpertsUsed: 2, Type: llmtest.WeightType}
	model := llmtest.Model(t, spec)
	f, err := gguf.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	for _, b := range llmtest.Builds {
		t.Run(b.String(), func(t *testing.T) {
			bin := llmtest.CLI(t, b, "llama-completion")
			dir := filepath.Join(t.TempDir(), "run")
			args := []string{"record", "-o", dir, "--cold", "--mem-limit", "112MiB", "--",
				bin, "-m", model, "-p", "the quick brown fox", "-n", strconv.Itoa(n),
				"-no-cnv", "--no-warmup", "--ignore-eos", "-t", "2", "-c", "256", "--temp", "0"}
			_, summary, err := runCmd(t, args...)
			if err != nil {
				t.Fatalf("record: %v\n%s", err, summary)
			}
			m, err := rundir.ReadMeta(dir)
			if err != nil {
				t.Fatal(err)
			}
			// Every probe point is in this build: nothing is said missing.
			for _, w := range m.Warnings {
				if strings.Contains(w, "is in none of the files searched") {
					t.Errorf("warning on a build that has every probe point: %s", w)
				}
			}

			var prefill, decode int
			weights := map[string]bool{}
			spoolEvents(t, dir, func(typ uint16, rec []byte) {
				switch uint32(typ) {
				case uint32(bpf.IocorrEventTypeEV_DECODE_BEGIN):
					if decoded(t, rec).Decode().N_tokens > 1 {
						prefill++
					} else {
						decode++
					}
				case uint32(bpf.IocorrEventTypeEV_NODE):
					checkWeightOffset(t, f, decoded(t, rec).Node(), weights)
				}
			})
			if prefill != 1 || decode != n-1 {
				t.Errorf("recorded %d prefill and %d decode calls of llama_decode, llama-completion -n %d made 1 and %d\n%s", prefill, decode, n, n-1, summary)
			}
			for _, tensor := range f.Tensors {
				if strings.HasPrefix(tensor.Name, "blk.") && !weights[tensor.Name] {
					t.Errorf("no graph node reads %s", tensor.Name)
				}
			}

			st, err := index.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			toks, err := st.Tokens()
			if err != nil {
				t.Fatal(err)
			}
			decodeTok := map[uint32]bool{}
			for _, tk := range toks {
				if correlate.PhaseName(tk.Phase) == "decode" {
					decodeTok[tk.Token] = true
				}
			}
			picks := 0
			seen := map[[3]uint32]bool{} // token, layer, expert
			if err := st.ExpertSelections(func(s correlate.ExpertSel) error {
				k := [3]uint32{s.Token, uint32(s.Layer), uint32(s.Expert)}
				if decodeTok[s.Token] && !seen[k] {
					picks++
				}
				seen[k] = true
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if want := (n - 1) * spec.Layers * spec.ExpertsUsed; picks != want || len(decodeTok) != n-1 {
				t.Errorf("router picks in %d decode tokens: %d, want %d tokens × %d layers × %d experts = %d",
					len(decodeTok), picks, n-1, spec.Layers, spec.ExpertsUsed, want)
			}

			// Every fault in an expert tensor while a token decodes lands in
			// an expert the router picked for that token and layer, or on a
			// page readahead brought in.
			ef := countExpertFaults(t, st, func(tok uint32) bool { return decodeTok[tok] })
			if ef.picked == 0 {
				t.Errorf("no fault in a picked expert while decoding: the run had no memory pressure\n%s", summary)
			}
			t.Logf("%s: %d prefill + %d decode calls, %d picks; expert faults while decoding: %d in picked experts, %d on read-ahead pages, %d neither",
				b, prefill, decode, picks, ef.picked, ef.readAhead, ef.neither)
		})
	}
}

// TestRecordBuildWithoutAProbePointSaysWhatIsMissing records the static
// llama-completion with one probe point's symbol removed, as a build
// that inlined or stripped that function has it: what the point records
// is absent, the rest is recorded, and the summary and meta.json name
// the symbol and what is lost instead of leaving a silent zero.
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
		strip   string
		lost    uint32 // the event type the point records
		warning string
	}{
		{"no get_rows: no expert picks", bpf.SymGetRows, uint32(bpf.IocorrEventTypeEV_EXPERTS), "expert picks are not recorded"},
		{"no graph_compute: no graphs", bpf.SymGraphCompute, uint32(bpf.IocorrEventTypeEV_NODE), "graphs and their nodes"},
	}
	const n = 4
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "llama-completion")
			if out, err := exec.Command(objcopy, "--strip-symbol="+tc.strip, llmtest.CLI(t, llmtest.Static, "llama-completion"), bin).CombinedOutput(); err != nil {
				t.Fatalf("objcopy: %v\n%s", err, out)
			}
			// A file written moments before is probed: on the disk first.
			if out, err := exec.Command("sync", bin).CombinedOutput(); err != nil {
				t.Fatalf("sync: %v\n%s", err, out)
			}
			dir := filepath.Join(t.TempDir(), "run")
			args := []string{"record", "-o", dir, "--no-ingest", "--", bin, "-m", model, "-p", "the quick brown fox", "-n", strconv.Itoa(n),
				"-no-cnv", "--no-warmup", "--ignore-eos", "-t", "2", "-c", "256", "--temp", "0"}
			_, summary, err := runCmd(t, args...)
			if err != nil {
				t.Fatalf("record: %v\n%s", err, summary)
			}
			var calls, lost int
			spoolEvents(t, dir, func(typ uint16, rec []byte) {
				switch uint32(typ) {
				case uint32(bpf.IocorrEventTypeEV_DECODE_BEGIN):
					calls++
				case tc.lost:
					lost++
				}
			})
			if calls != n {
				t.Errorf("recorded %d llama_decode calls, llama-completion -n %d made %d", calls, n, n)
			}
			if lost != 0 {
				t.Errorf("%d events of type %d recorded without %s", lost, tc.lost, tc.strip)
			}
			m, err := rundir.ReadMeta(dir)
			if err != nil {
				t.Fatal(err)
			}
			said := func(ws []string) bool {
				for _, w := range ws {
					if strings.Contains(w, tc.strip+" is in none of the files searched ("+bin) && strings.Contains(w, tc.warning) {
						return true
					}
				}
				return false
			}
			if !said(m.Warnings) {
				t.Errorf("meta.json does not say that %s is missing and %q:\n%s", tc.strip, tc.warning, strings.Join(m.Warnings, "\n"))
			}
			if !said(strings.Split(summary, "\n")) {
				t.Errorf("the record summary does not say that %s is missing:\n%s", tc.strip, summary)
			}
		})
	}
}
