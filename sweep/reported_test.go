package sweep_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/sweep"
)

func TestReportedTokensPerSReadsWhatTheCommandSaid(t *testing.T) {
	tests := []struct {
		name string
		out  string
		want float64
		ok   bool
	}{
		{"llama.cpp 2026", "0.15.309.887 I common_perf_print: prompt eval time =    2007.15 ms /    16 tokens (  125.45 ms per token,     7.97 tokens per second)\n" +
			"0.15.309.904 I common_perf_print:        eval time =   12654.10 ms /     7 runs   ( 1807.73 ms per token,     0.55 tokens per second)\n", 7 / 12.6541, true},
		{"older llama.cpp", "llama_perf_context_print:        eval time =     500.00 ms /    10 tokens (   50.00 ms per token,    20.00 tokens per second)\n", 20, true},
		{"only the prompt's line", "common_perf_print: prompt eval time =    2007.15 ms /    16 tokens\n", 0, false},
		{"the test driver's JSON", "some text\n{\"tokens\":6,\"tokens_per_s\":12.5}\n", 12.5, true},
		{"JSON without the field", "{\"tokens\":6}\n", 0, false},
		{"nothing", "hello\n", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := sweep.ReportedTokensPerS([]byte(tc.out))
			if ok != tc.ok || (ok && (got-tc.want)/tc.want > 1e-9 || ok && (tc.want-got)/tc.want > 1e-9) {
				t.Errorf("%v %v, want %v %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestNoReportSaysWhatTheOutputEndedWithAndWhyLlamaCppLosesIt(t *testing.T) {
	tests := []struct {
		name     string
		out      string
		lostLine bool
	}{
		{"llama.cpp cut after its generated text", "0.01.113.201 I llama_context: n_ctx = 2048\n0.02.323.135 I generate: n_ctx = 2048\nThe memory of a machine bd cn cn", true},
		{"another command", "hello\nbye", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			why := sweep.NoReport([]byte(tc.out))
			if !strings.HasPrefix(why, sweep.NoReportedTokensPerS) || !strings.Contains(why, strconv.Quote(sweep.LastLine([]byte(tc.out)))) {
				t.Errorf("%q: want the reason and the output's last line", why)
			}
			if got := strings.Contains(why, "log thread"); got != tc.lostLine {
				t.Errorf("%q: names llama.cpp's log thread %v, want %v", why, got, tc.lostLine)
			}
		})
	}
}
