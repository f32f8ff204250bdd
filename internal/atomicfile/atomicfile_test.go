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
