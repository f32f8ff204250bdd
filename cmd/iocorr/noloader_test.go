package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/llmtest"
)

// loaderPackages are what a build without the BPF loader must not link.
var loaderPackages = []string{"github.com/cilium/ebpf", module + "bpf", module + "recorder"}

const module = "github.com/iocorr/iocorr/"

// iocorr builds for macOS and Windows without the loader, and the build
// that the tag noloader makes here is that same set of packages.
func TestTheBuildsWithoutTheLoaderLinkNone(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		tags string
	}{
		{"macOS", []string{"GOOS=darwin", "GOARCH=arm64"}, ""},
		{"Windows", []string{"GOOS=windows", "GOARCH=amd64"}, ""},
		{"Linux, tag noloader", []string{"GOOS=linux"}, "noloader"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			list := exec.Command("go", "list", "-deps", "-tags", tc.tags, ".")
			list.Env = append(os.Environ(), tc.env...)
			out, err := list.Output()
			if err != nil {
				t.Fatalf("go list: %v", err)
			}
			for _, dep := range strings.Fields(string(out)) {
				for _, l := range loaderPackages {
					if dep == l || strings.HasPrefix(dep, l+"/") {
						t.Errorf("links %s", dep)
					}
				}
			}
		})
	}
}

// A run recorded on Linux is ingested, queried and reported by the build
// without the loader (that of macOS and Windows, made here with the tag
// noloader): from the shared recorded run's spool and metadata alone it
// builds the store whose query the full build gives, and writes the
// report; record says in one line that it is Linux only.
func TestARecordedRunIsIngestedQueriedAndReportedByTheBuildWithoutTheLoader(t *testing.T) {
	requireBPF(t)
	rec := llmtest.RecordedMoE(t)
	bin := filepath.Join(t.TempDir(), "iocorr")
	if out, err := exec.Command("go", "build", "-tags", "noloader", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -tags noloader: %v\n%s", err, out)
	}
	// The run as it would be copied off the board: everything but the store.
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.CopyFS(dir, os.DirFS(rec.Dir)); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, rundir.DBDir)); err != nil {
		t.Fatal(err)
	}
	iocorr := func(args ...string) (string, string, error) {
		var out, errb bytes.Buffer
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}
	if _, errOut, err := iocorr("ingest", dir); err != nil {
		t.Fatalf("ingest: %v\n%s", err, errOut)
	}
	for _, by := range []string{"layer", "token"} {
		got, errOut, err := iocorr("query", "-i", dir, "--by", by)
		if err != nil {
			t.Fatalf("query --by %s: %v\n%s", by, err, errOut)
		}
		want, _, err := runCmd(t, "query", "-i", rec.Dir, "--by", by)
		if err != nil {
			t.Fatal(err)
		}
		if got != want || got == "" {
			t.Errorf("query --by %s of the store built without the loader:\n%s\nwant, as the full build's store gives it:\n%s", by, got, want)
		}
	}
	html := filepath.Join(t.TempDir(), "report.html")
	if _, errOut, err := iocorr("report", "-i", dir, "-o", html); err != nil {
		t.Fatalf("report: %v\n%s", err, errOut)
	}
	if b, err := os.ReadFile(html); err != nil || !bytes.Contains(b, []byte("<svg")) {
		t.Errorf("report: %d bytes, %v; want a page with its charts", len(b), err)
	}
	_, errOut, err := iocorr("record", "-o", filepath.Join(t.TempDir(), "r"), "--", "true")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || errOut != "iocorr record: Linux only\n" {
		t.Errorf("record: %v, stderr %q; want exit status 1 and the one line %q", err, errOut, "iocorr record: Linux only")
	}
}
