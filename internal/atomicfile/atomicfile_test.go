package atomicfile_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/iocorr/iocorr/internal/atomicfile"
)

func TestWriteReplacesWholeOrNotAtAll(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name    string
		fill    func(io.Writer) error
		want    string
		wantErr bool
	}{
		{"a complete write replaces the file", func(w io.Writer) error { _, err := io.WriteString(w, "new"); return err }, "new", false},
		{"a failed fill leaves the old file", func(w io.Writer) error { io.WriteString(w, "partial"); return boom }, "old", true},
	}
	for _, tc := range tests {
		for _, sync := range []bool{false, true} {
			t.Run(tc.name, func(t *testing.T) {
				dir := t.TempDir()
				path := filepath.Join(dir, "f")
				if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
					t.Fatal(err)
				}
				// What a writer killed midway left behind is replaced.
				if err := os.WriteFile(atomicfile.TempName(path), []byte("torn"), 0o600); err != nil {
					t.Fatal(err)
				}
				err := atomicfile.Write(path, 0o644, sync, tc.fill)
				if (err != nil) != tc.wantErr {
					t.Fatalf("err = %v, want error %v", err, tc.wantErr)
				}
				if tc.wantErr && !errors.Is(err, boom) {
					t.Errorf("err = %v does not wrap the fill's error", err)
				}
				got, _ := os.ReadFile(path)
				if string(got) != tc.want {
					t.Errorf("content %q, want %q", got, tc.want)
				}
				ents, _ := os.ReadDir(dir)
				if len(ents) != 1 {
					t.Errorf("%d entries left in the directory, want only the file", len(ents))
				}
				if fi, _ := os.Stat(path); !tc.wantErr && fi.Mode().Perm() != 0o644 {
					t.Errorf("mode %v, want 0644", fi.Mode().Perm())
				}
			})
		}
	}
}

func TestPublishPutsAWrittenFileInPlaceOrLeavesTheOldOne(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, tmp, path string) // what stands at tmp and path before Publish
		want    string                               // path's content after Publish ("" for a directory)
		wantErr error
	}{
		{"a written file replaces the old one", func(t *testing.T, tmp, path string) {
			write(t, path, "old")
			write(t, tmp, "new")
		}, "new", nil},
		{"a written file is published where nothing stood", func(t *testing.T, tmp, path string) {
			write(t, tmp, "new")
		}, "new", nil},
		{"a missing temporary file leaves the old one", func(t *testing.T, tmp, path string) {
			write(t, path, "old")
		}, "old", os.ErrNotExist},
		{"a failed rename (a directory with entries in the way) removes the temporary file", func(t *testing.T, tmp, path string) {
			write(t, filepath.Join(path, "x"), "in the way")
			write(t, tmp, "new")
		}, "", nil},
	}
	for _, tc := range tests {
		for _, sync := range []bool{false, true} {
			t.Run(tc.name, func(t *testing.T) {
				dir := t.TempDir()
				path := filepath.Join(dir, "model.gguf")
				tmp := path + ".tmp123" // not TempName: another program chose it
				tc.setup(t, tmp, path)
				err := atomicfile.Publish(tmp, path, 0o644, sync)
				fi, statErr := os.Stat(path)
				switch {
				case tc.want == "" && err == nil:
					t.Fatalf("published over a directory with entries")
				case tc.want != "" && (err != nil) != (tc.wantErr != nil):
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
					t.Errorf("err = %v does not wrap %v", err, tc.wantErr)
				case statErr != nil:
					t.Fatal(statErr)
				}
				if tc.want != "" {
					got, _ := os.ReadFile(path)
					if string(got) != tc.want {
						t.Errorf("content %q, want %q", got, tc.want)
					}
					if err == nil && fi.Mode().Perm() != 0o644 {
						t.Errorf("mode %v, want 0644", fi.Mode().Perm())
					}
				} else if !fi.IsDir() {
					t.Errorf("the directory in the way was replaced")
				}
				if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("the temporary file is still there (%v)", err)
				}
			})
		}
	}
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}
