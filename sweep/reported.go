package sweep

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// evalLine is llama.cpp's own decode timing, as its tools print it at the
// end ("common_perf_print:        eval time =   12654.10 ms /     7 runs
// (...)"; older builds say llama_perf_context_print and "tokens"). The
// prompt's line says "prompt eval time" and is not it.
var evalLine = regexp.MustCompile(`(?m)[:\s]\s+eval time =\s*([0-9.]+) ms /\s*([0-9]+) (?:runs|tokens)`)

// ReportedTokensPerS is the decode speed the command itself reported in
// its output: llama.cpp's eval-time line, or the tokens_per_s field of a
// JSON object on a line of its own (iocorr's test driver). It is how an
// untraced run is timed (no probe sees it), and the traced run is timed the
// same way beside it, so the two compare like with like. ok is false when
// the output has neither.
func ReportedTokensPerS(out []byte) (tps float64, ok bool) {
	if m := evalLine.FindAllSubmatch(out, -1); len(m) > 0 {
		last := m[len(m)-1]
		ms, err1 := strconv.ParseFloat(string(last[1]), 64)
		n, err2 := strconv.ParseFloat(string(last[2]), 64)
		if err1 == nil && err2 == nil && ms > 0 && n > 0 {
			return n / (ms / 1000), true
		}
	}
	lines := bytes.Split(out, []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		l := bytes.TrimSpace(lines[i])
		if len(l) == 0 || l[0] != '{' {
			continue
		}
		var v struct {
			TokensPerS *float64 `json:"tokens_per_s"`
		}
		if json.Unmarshal(l, &v) == nil && v.TokensPerS != nil && *v.TokensPerS > 0 {
			return *v.TokensPerS, true
		}
	}
	return 0, false
}

// NoReportedTokensPerS is why a run has no reported decode speed.
const NoReportedTokensPerS = "the command reported no decode speed (no llama.cpp eval-time line, no JSON tokens_per_s)"

// NoReport is why out, a run's output, has no reported decode speed:
// NoReportedTokensPerS, what the output ended with, and, where llama.cpp
// wrote it, the likely cause. llama.cpp's tools write their log from a
// thread of their own that is never flushed at exit (common_log_main
// leaks it on purpose), so a process that exits before that thread runs
// loses its last lines, the eval-time line with them: on the lab's 2 vCPUs
// with two busy loops beside most of them, 1 of 40 llama-completion runs
// under a 128 MiB limit did.
func NoReport(out []byte) string {
	why := fmt.Sprintf("%s; its output ended %q", NoReportedTokensPerS, LastLine(out))
	if bytes.Contains(out, []byte("llama")) {
		why += " (llama.cpp's log thread can lose its last lines when the process exits)"
	}
	return why
}

// LastLine is the last line of a command's output: what a run that
// reported no speed said last, for its error.
func LastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}
