package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// runCmd runs iocorr with args, as the command line does, and gives its
// stdout and stderr.
func runCmd(t testing.TB, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), err
}

// requireOneLineError fails unless err is one line, starting "CMD: " and
// saying want.
func requireOneLineError(t *testing.T, err error, cmd, want string) {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, cmd+": ") || !strings.Contains(msg, want) || strings.Contains(msg, "\n") {
		t.Errorf("got %q, want one line starting %q containing %q", msg, cmd+": ", want)
	}
}

// dirNames are the names in dir, sorted.
func dirNames(dir string) []string {
	var names []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// statsTables are the tables of `iocorr stats --format json` of the run
// in dir, by name.
func statsTables(t *testing.T, dir string) map[string][]map[string]any {
	t.Helper()
	out, errOut, err := runCmd(t, "stats", "-i", dir, "--format", "json")
	if err != nil {
		t.Fatalf("stats: %v\n%s", err, errOut)
	}
	var rep struct {
		Tables map[string][]map[string]any `json:"tables"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	return rep.Tables
}
