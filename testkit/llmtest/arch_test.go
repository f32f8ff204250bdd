package llmtest

import (
	"strings"
	"testing"
)

func TestParseRoutingReadsTheOraclesLines(t *testing.T) {
	out := "decode 1 3\ntopk 1 0 0 5 2\ntopk 1 0 1 1 0\ntopk 1 0 2 7 3\ntopk 1 1 0 4 6\n" +
		"decode 2 1\ntopk 2 0 0 2 5\ntopk 2 1 0 0 1\ndone 3 2\n"
	r, err := ParseRouting([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if r.PromptTokens != 3 || len(r.Calls) != 2 || r.Calls[1].Tokens != 3 || r.Calls[2].Tokens != 1 {
		t.Fatalf("parsed %+v", r)
	}
	if got := r.Calls[1].Rows[0]; len(got) != 3 || got[2][0] != 7 || got[2][1] != 3 {
		t.Errorf("call 1 layer 0 rows %v", got)
	}
	if got := r.Calls[2].Rows[1]; len(got) != 1 || got[0][1] != 1 {
		t.Errorf("call 2 layer 1 rows %v", got)
	}
}

func TestParseRoutingRejectsWhatTheOracleNeverPrints(t *testing.T) {
	for _, c := range []struct {
		name, out, msg string
	}{
		{"no done line", "decode 1 1\ntopk 1 0 0 1 2\n", "ends before its done line"},
		{"ids before their call", "topk 1 0 0 1 2\ndone 1 0\n", "ids of call 1 before its decode line"},
		{"a row skipped", "decode 1 2\ntopk 1 0 1 1 2\ndone 2 1\n", "row 1 of layer 0 after 0 rows"},
		{"calls miscounted", "decode 1 1\ndone 1 2\n", "says 2 calls and printed 1"},
		{"a stray line", "decode 1 1\nllama_model_load: error\ndone 1 1\n", "is no line of the oracle's"},
		{"not a number", "decode 1 x\ndone 1 1\n", `line 1: "decode 1 x"`},
	} {
		_, err := ParseRouting([]byte(c.out))
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.msg)
		}
	}
}
