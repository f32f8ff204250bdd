package recorder_test

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/rectest"
	"github.com/iocorr/iocorr/testkit/spooltest"
	"github.com/iocorr/iocorr/testkit/testenv"
	"github.com/iocorr/iocorr/wire"
)

// TestEveryBufferNameIsRecordedThoughItsPageWasUnmappedAtTheReturn records
// the buffer namer: each name it returns lies in a page of a file mapping
// the process has not touched yet, so the return probe cannot read the
// first (a BPF program cannot fault a page in) and reads it at the
// thread's next call, by when the caller has printed it. Before, that
// name was recorded empty, and every weight in such a buffer (llama.cpp's
// CPU_Mapped, a literal in libggml-base's .rodata) had no device; a fresh
// clone's hybrid test failed so once. The last name is never touched and
// its thread never calls again: the recorder reads it at the end from the
// file the maps snapshot places it in. A name in anonymous memory no file
// holds is recorded empty (a buffer of no readable name), with a warning.
func TestEveryBufferNameIsRecordedThoughItsPageWasUnmappedAtTheReturn(t *testing.T) {
	testenv.RequireBPF(t)
	namer := llmtest.BuildBufNamer(t)
	dir := t.TempDir()
	// The smallest GGUF file: mapping it makes the recorder snapshot the
	// namer's maps.
	model := filepath.Join(dir, "empty.gguf")
	var hdr bytes.Buffer
	hdr.WriteString("GGUF")
	binary.Write(&hdr, binary.LittleEndian, struct {
		Version         uint32
		Tensors, Values uint64
	}{3, 0, 0})
	if err := os.WriteFile(model, hdr.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	want := []string{"CPU_Mapped", "Vulkan0", "Vulkan_Host"}
	run := filepath.Join(dir, "run")
	out := rectest.Record(t, run, rectest.Options{}, append([]string{namer, filepath.Join(dir, "names"), model}, want...)...)
	if printed := strings.Fields(out.Stdout); !slices.Equal(printed, want[:len(want)-1]) {
		t.Fatalf("the namer printed %q, want %q", printed, want[:len(want)-1])
	}
	got := map[uint64][]string{}
	spooltest.BufNames(t, run, func(b *wire.BufnameEvent) {
		got[b.Buffer] = append(got[b.Buffer], wire.CString(b.Name[:]))
	})
	for i, name := range append(want, "") {
		if g := got[uint64(i+1)]; !slices.Equal(g, []string{name}) {
			t.Errorf("buffer %d: names recorded %q, want %q once", i+1, g, name)
		}
	}
	if len(got) != len(want)+1 {
		t.Errorf("names of %d buffers, the namer has %d", len(got), len(want)+1)
	}
	m, err := rundir.ReadMeta(run)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(m.Warnings, func(w string) bool {
		return strings.Contains(w, "1 buffer names were unreadable") && strings.Contains(w, "buffer 0x4 ") && strings.Contains(w, "no file")
	}) {
		t.Errorf("no warning of the unnamed buffer 0x4 in anonymous memory: %q", m.Warnings)
	}
}
