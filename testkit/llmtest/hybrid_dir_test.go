package llmtest

import (
	"os"
	"path/filepath"
	"testing"
)

// TestHybridDirIsRemadeWhenALibraryNoLongerResolves: the hybrid directory
// lives per machine, the Vulkan build per checkout; a directory whose
// libraries point at a deleted checkout must be made again, not used (it
// silently runs llama.cpp on the CPU alone).
func TestHybridDirIsRemadeWhenALibraryNoLongerResolves(t *testing.T) {
	for _, tc := range []struct {
		name  string
		make  func(t *testing.T, dir, file string)
		whole bool
	}{
		{"every file there", func(t *testing.T, dir, file string) { writeFile(t, filepath.Join(dir, file)) }, true},
		{"a library linked into a deleted checkout", func(t *testing.T, dir, file string) {
			if file == "libggml-vulkan.so" {
				if err := os.Symlink(filepath.Join(t.TempDir(), "gone", file), filepath.Join(dir, file)); err != nil {
					t.Fatal(err)
				}
				return
			}
			writeFile(t, filepath.Join(dir, file))
		}, false},
		{"a soname missing", func(t *testing.T, dir, file string) {
			if file != "libggml.so.0" {
				writeFile(t, filepath.Join(dir, file))
			}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range append(append([]string{}, hybridTools...), hybridSonames...) {
				tc.make(t, dir, f)
			}
			if got := hybridComplete(dir); got != tc.whole {
				t.Errorf("hybridComplete = %v, want %v", got, tc.whole)
			}
		})
	}
}

func writeFile(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
}
