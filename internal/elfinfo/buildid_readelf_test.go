package elfinfo_test

// Apart from the package: llmtest reaches elfinfo through ggml.

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/iocorr/iocorr/internal/elfinfo"
	"github.com/iocorr/iocorr/testkit/llmtest"
)

var readelfBuildID = regexp.MustCompile(`Build ID: ([0-9a-f]+)`)

// readelf is the oracle: binutils' own reading of the notes.
func readelf(t *testing.T, path string) string {
	t.Helper()
	out, err := exec.Command("readelf", "-n", path).Output()
	if err != nil {
		t.Fatalf("readelf -n %s: %v", path, err)
	}
	m := readelfBuildID.FindSubmatch(out)
	if m == nil {
		return ""
	}
	return string(m[1])
}

func TestBuildIDAgreesWithReadelf(t *testing.T) {
	tests := []struct {
		name, path string
	}{
		{"C executable", "/bin/ls"},
		{"shared library", "/lib/x86_64-linux-gnu/libc.so.6"},
		// A Go test binary: its Go build-id note comes before the GNU one.
		{"Go executable", os.Args[0]},
	}
	if lib, err := llmtest.LlamaLib(); err == nil {
		tests = append(tests, struct{ name, path string }{"libllama", lib})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := readelf(t, tc.path)
			if want == "" {
				t.Fatalf("readelf finds no build id in %s", tc.path)
			}
			got, err := elfinfo.BuildID(tc.path)
			if err != nil || got != want {
				t.Errorf("elfinfo.BuildID(%s) = %q, %v; readelf says %s", tc.path, got, err, want)
			}
		})
	}
}

func TestBuildIDOfAFileWithoutOne(t *testing.T) {
	dir := t.TempDir()
	noID := filepath.Join(dir, "ls-without-build-id")
	if out, err := exec.Command("objcopy", "--remove-section=.note.gnu.build-id", "/bin/ls", noID).CombinedOutput(); err != nil {
		t.Fatalf("objcopy: %v\n%s", err, out)
	}
	if id := readelf(t, noID); id != "" {
		t.Fatalf("readelf still finds %s", id)
	}
	if id, err := elfinfo.BuildID(noID); !errors.Is(err, elfinfo.ErrNoBuildID) {
		t.Errorf("BuildID = %q, %v; want elfinfo.ErrNoBuildID", id, err)
	}
	notELF := filepath.Join(dir, "text")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if id, err := elfinfo.BuildID(notELF); err == nil || errors.Is(err, elfinfo.ErrNoBuildID) {
		t.Errorf("a file that is not ELF: %q, %v; want an error other than elfinfo.ErrNoBuildID", id, err)
	}
}
