package sweep_test

import (
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/sweep"
	"github.com/iocorr/iocorr/testkit/runtest"
	"github.com/iocorr/iocorr/testkit/storetest"
)

// The figures of a sweep row come from the run's token rows: the tiny run
// has decode tokens 2 and 3, each with a 4 KiB block read and two major
// faults among three of 10 ns stall each; token 3 has a fourth fault (on
// anonymous memory, stalled 10 ns too).
func TestSweepFiguresComeFromTheDecodeTokens(t *testing.T) {
	dir := runtest.TinyRun(t)
	var r sweep.Row
	if err := sweep.Summarize(dir, &r); err != nil {
		t.Fatal(err)
	}
	// The oracle: the run's token rows, as `export faults-per-token` has
	// them (a start or duration not seen is none).
	st := storetest.OpenRun(t, dir).Store
	toks, err := st.Tokens()
	if err != nil {
		t.Fatal(err)
	}
	var first, last, inDecode uint64
	for _, tk := range toks {
		if event.PhaseName(tk.Phase) != "decode" {
			continue
		}
		start, dur := tk.StartNS, uint64(0)
		if start != 0 && tk.EndNS >= start {
			dur = tk.EndNS - start
		}
		if first == 0 {
			first = start
		}
		last = start + dur
		inDecode += dur
	}
	if r.Decode != 2 || r.ReadBytes != 2*4096 || r.Major != 4 || r.StallNS != 70 || r.DecodeNS != last-first {
		t.Fatalf("row %+v; want 2 decode tokens, 8192 bytes, 4 major faults, 70 ns stall over %d ns", r, last-first)
	}
	want := map[string]float64{"tokens_per_s": 2e9 / float64(last-first), "bytes_read_per_token": 4096, "major_faults_per_token": 2,
		"stall_share": 70 / float64(inDecode)}
	got := map[string]*float64{"tokens_per_s": r.TokensPerS, "bytes_read_per_token": r.BytesPerToken,
		"major_faults_per_token": r.MajorPerToken, "stall_share": r.StallShare}
	for name, w := range want {
		if got[name] == nil || *got[name] != w {
			t.Errorf("%s = %v, want %v", name, got[name], w)
		}
	}
	if r.ExpertHitRate != nil || r.NA["expert_hit_rate"] == "" || len(r.NA) != 1 {
		t.Errorf("expert hit rate %v, NA %v: want NA with a reason, and no other NA", r.ExpertHitRate, r.NA)
	}
}
