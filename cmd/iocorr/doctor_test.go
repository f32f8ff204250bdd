package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

type doctorRow struct {
	Check, Status, Detail string
}

// doctorRows runs doctor with JSON output and returns its rows by check.
func doctorRows(t *testing.T, args ...string) (map[string]doctorRow, error) {
	t.Helper()
	out, _, err := runCmd(t, append([]string{"doctor", "--format", "json"}, args...)...)
	var rows []doctorRow
	if jerr := json.Unmarshal([]byte(out), &rows); jerr != nil {
		t.Fatalf("doctor output is not JSON: %v\n%s", jerr, out)
	}
	m := map[string]doctorRow{}
	for _, r := range rows {
		m[r.Check] = r
	}
	return m, err
}

// What doctor finds is doctor.Run's (package doctor tests it); the
// command prints every check and exits 1 when a required one failed.
func TestDoctorPrintsEveryCheckAndExitsOneWhenARequiredOneFails(t *testing.T) {
	requireBPF(t)
	rows, err := doctorRows(t)
	if err != nil {
		t.Fatalf("doctor failed on the machine the record tests pass on: %v\n%v", err, rows)
	}
	if rows["kernel BTF"].Status != "ok" || rows["probe point llama_decode"].Status != "" {
		t.Errorf("without a command: kernel BTF %+v, probe point row %+v", rows["kernel BTF"], rows["probe point llama_decode"])
	}
	out, _, _ := runCmd(t, "doctor")
	if !strings.Contains(out, "✓") {
		t.Errorf("the table shows no ✓:\n%s", out)
	}

	rows, err = doctorRows(t, "--", "no-such-command-iocorr")
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 1 {
		t.Fatalf("a required check failed: err = %v, want exit status 1", err)
	}
	if r := rows["command no-such-command-iocorr"]; r.Status != "fail" || !strings.HasPrefix(r.Detail, "required: ") {
		t.Errorf("the failed check: %+v, want status fail and a detail saying it is required", r)
	}
	if _, errOut, _ := runCmd(t, "doctor", "--", "no-such-command-iocorr"); !strings.Contains(errOut, "required checks failed") {
		t.Errorf("stderr does not say why doctor failed: %q", errOut)
	}
}
