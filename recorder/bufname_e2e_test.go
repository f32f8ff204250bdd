package recorder_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

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
// clone's hybrid test failed so once.
func TestEveryBufferNameIsRecordedThoughItsPageWasUnmappedAtTheReturn(t *testing.T) {
	testenv.RequireBPF(t)
	namer := llmtest.BuildBufNamer(t)
	dir := t.TempDir()
	want := []string{"CPU_Mapped", "Vulkan0", "Vulkan_Host"}
	out := rectest.Record(t, filepath.Join(dir, "run"), rectest.Options{}, append([]string{namer, filepath.Join(dir, "names")}, want...)...)
	if printed := strings.Fields(out.Stdout); !slices.Equal(printed, want) {
		t.Fatalf("the namer printed %q, want %q", printed, want)
	}
	var got []string
	spooltest.BufNames(t, filepath.Join(dir, "run"), func(b *wire.BufnameEvent) {
		if i := b.Buffer; i < 1 || int(i) > len(want) {
			t.Errorf("a name of buffer %#x, the namer has 1 to %d", i, len(want))
		}
		got = append(got, wire.CString(b.Name[:]))
	})
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("buffer names recorded %q, want %q (each once)", got, want)
	}
}
