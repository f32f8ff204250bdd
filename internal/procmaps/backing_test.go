package procmaps

import (
	"os"
	"path/filepath"
	"testing"
)

func TestBackingOfTellsWhatAMappingsNameIs(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "model.gguf")
	if err := os.WriteFile(file, []byte("GGUF"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		path string
		want Backing
	}{
		{"a regular file", file, BackingFile},
		{"a directory is not a file", dir, BackingOther},
		// A GPU driver's mappings: /dev/nvidia0 is a character device
		// there; /dev/null is one everywhere.
		{"a character device", "/dev/null", BackingDevice},
		{"the driver's memfd", "/memfd:/.glXXXXXX (deleted)", BackingMemfd},
		{"a memfd named with spaces", "/memfd:ggml buffer (deleted)", BackingMemfd},
		{"a file deleted while mapped", file + " (deleted)", BackingDeleted},
		{"a shared /dev/zero mapping (shmem)", "/dev/zero (deleted)", BackingDeleted},
		{"SYSV shared memory", "/SYSV00000000", BackingOther},
		{"a pseudo name", "[heap]", BackingOther},
		{"an anonymous inode", "anon_inode:[perf_event]", BackingOther},
		{"no name", "", BackingOther},
		{"a path that is gone", filepath.Join(dir, "gone"), BackingOther},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := BackingOf(tc.path); got != tc.want {
				t.Fatalf("BackingOf(%q) = %d, want %d", tc.path, got, tc.want)
			}
		})
	}
}

func TestMappingNameKeepsTheDeletedSuffix(t *testing.T) {
	m, err := ParseLine("7f00-7f10 rw-s 00000000 00:01 1042 /memfd:/.glXXXXXX (deleted)")
	if err != nil {
		t.Fatal(err)
	}
	if !m.Deleted || m.Name() != "/memfd:/.glXXXXXX (deleted)" || BackingOf(m.Name()) != BackingMemfd {
		t.Fatalf("parsed %+v, name %q", m, m.Name())
	}
}
