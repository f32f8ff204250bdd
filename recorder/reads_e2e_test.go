package recorder_test

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"unsafe"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/recorder"
	"github.com/iocorr/iocorr/stats"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/rectest"
	"github.com/iocorr/iocorr/testkit/spooltest"
	"github.com/iocorr/iocorr/testkit/storetest"
	"github.com/iocorr/iocorr/testkit/testenv"
	"github.com/iocorr/iocorr/wire"
)

// Read calls of a model file, recorded through the library as `iocorr
// record` records them: call by call in the spool, and charged to the
// tensors whose bytes they request in the store.

type readSpec struct {
	kind      string // the reader's name of the call
	off, n    int64
	want      wire.ReadKind
	wantDirec bool
}

// requestedByTensor is the test's own attribution of byte ranges of the
// model file to its tensors: the bytes of each range inside each tensor.
func requestedByTensor(f *gguf.File, rs []readSpec) map[string]int64 {
	out := map[string]int64{}
	for _, r := range rs {
		for _, tn := range f.Tensors {
			lo, hi := max(r.off, tn.FileOffset), min(r.off+r.n, tn.FileOffset+tn.Size)
			if hi > lo {
				out[tn.Name] += hi - lo
			}
		}
	}
	return out
}

// storeRequested is bytes_requested per tensor in the run's store, as
// `iocorr query --by tensor` reads it.
func storeRequested(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	st := storetest.OpenRun(t, dir).Store
	rows, err := st.Query(store.Query{By: "tensor"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, r := range rows {
		if v := r.RequestedBytes; v > 0 {
			got[r.Key] = int64(v)
		}
	}
	return got
}

// TestReadSyscallsOfAModelFileAreRecordedExactly: a reader that reads
// known ranges of a model file with each read call iocorr traces —
// read, pread64, readv, preadv, preadv2 (at an offset and at the file
// position) and an io_uring read — is recorded call by call with its kind,
// offset and length, and the store charges exactly the bytes of each range
// to the tensors that hold them, as bytes requested.
func TestReadSyscallsOfAModelFileAreRecordedExactly(t *testing.T) {
	testenv.RequireBPF(t)
	reader := llmtest.BuildReader(t)
	model, f := rectest.PageableMoE(t)
	up := f.Tensor("blk.0.ffn_up_exps.weight")
	lo1, _ := up.ExpertRange(1)
	specs := []readSpec{
		{"read", f.DataOffset, 10000, wire.ReadKindREAD_READ, false},
		{"pread64", lo1, 65536, wire.ReadKindREAD_PREAD64, false},
		{"readv", lo1 + 4096, 12345, wire.ReadKindREAD_READV, false},
		{"preadv", up.FileOffset, 3 * 4096, wire.ReadKindREAD_PREADV, false},
		{"preadv2", up.FileOffset + up.Size - 5000, 9000, wire.ReadKindREAD_PREADV2, false}, // across a tensor boundary
		{"preadv2cur", f.DataOffset + 777, 4321, wire.ReadKindREAD_PREADV2, false},
		{"uring", lo1 + 100000, 20000, wire.ReadKindREAD_IO_URING, false},
	}
	argv := []string{reader, model}
	for _, s := range specs {
		argv = append(argv, fmt.Sprintf("%s:%d:%d", s.kind, s.off, s.n))
	}
	dir := filepath.Join(t.TempDir(), "run")
	rectest.Record(t, dir, rectest.Options{Set: func(o *recorder.Options) { o.Models = []string{model} }}, argv...)
	var got []string
	spooltest.Events(t, dir, func(typ uint16, rec []byte) {
		if uint32(typ) == uint32(wire.EventTypeEV_READ) {
			e := (*wire.ReadEvent)(unsafe.Pointer(&rec[0]))
			got = append(got, fmt.Sprintf("%d@%d+%d direct=%d", e.Kind, e.Offset, e.Bytes, e.Direct))
		}
	})
	var want []string
	for _, s := range specs {
		want = append(want, fmt.Sprintf("%d@%d+%d direct=0", s.want, s.off, s.n))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("recorded reads\n%s\nthe reader's\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if g, w := storeRequested(t, dir), requestedByTensor(f, specs); fmt.Sprint(sortedMap(g)) != fmt.Sprint(sortedMap(w)) {
		t.Errorf("bytes requested per tensor\n%v\nfrom the reader's ranges\n%v", sortedMap(g), sortedMap(w))
	}
}

func sortedMap(m map[string]int64) []string {
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(out)
	return out
}

// TestLoadModesAreRecordedAsWhatTheyRead records llama.cpp (built from
// source) loading one model each way it can: with mmap the weights are
// mapped, and read calls request only what reading the GGUF header with
// stdio spills into the first tensors; with --load-mode
// none (stdio reads) and dio (O_DIRECT reads into an aligned buffer) every
// tensor's bytes are requested at load — at least its size, and no more
// than the reads' rounding adds at its two ends — and under dio the device
// reads of the model are the bytes requested, about its size.
func TestLoadModesAreRecordedAsWhatTheyRead(t *testing.T) {
	testenv.RequireBPF(t)
	llmtest.Require(t)
	model, f := rectest.PageableMoE(t)
	var dataSize int64
	for _, tn := range f.Tensors {
		dataSize += tn.Size
	}
	// The most a read's rounding adds at one end of a tensor: stdio's
	// buffer (none) or the O_DIRECT alignment (dio), both within 64 KiB.
	const slack = 64 << 10
	// --lazy-mode on reads only tensors an architecture marks lazy (none
	// in a llama model) through the mapping: with none it loads as none.
	for _, run := range []struct{ name, mode, lazy string }{
		{"mmap", "mmap", "auto"}, {"none", "none", "auto"}, {"dio", "dio", "auto"}, {"none, lazy-mode on", "none", "on"},
	} {
		mode := run.mode
		t.Run(run.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			rectest.Record(t, dir, rectest.Options{Cold: true}, llmtest.CLI(t, llmtest.Shared, "llama-completion"), "-m", model,
				"--load-mode", mode, "--lazy-mode", run.lazy, "-p", "hello", "-n", "2", "-no-cnv", "--no-warmup", "--ignore-eos", "-t", "2", "-c", "128")
			req := storeRequested(t, dir)
			var total int64
			for _, tn := range f.Tensors {
				got := req[tn.Name]
				total += got
				switch {
				case mode == "mmap" && got > slack:
					// Only the GGUF header is read, with stdio: its buffer
					// spills into the first tensors' bytes.
					t.Errorf("%s: %d bytes requested by read calls under mmap", tn.Name, got)
				case mode != "mmap" && (got < tn.Size || got > tn.Size+2*slack):
					t.Errorf("%s: %d bytes requested, its size is %d", tn.Name, got, tn.Size)
				}
			}
			t.Logf("%s: %d bytes requested of %d bytes of tensors", mode, total, dataSize)
			if mode != "dio" {
				return
			}
			// Device bytes of the model: what O_DIRECT read, no page cache between.
			// (stats' tensors table, as `iocorr stats` prints it)
			run := storetest.OpenRun(t, dir)
			rep, err := stats.Compute(run, stats.Options{})
			if err != nil {
				t.Fatal(err)
			}
			tb := rep.Table("tensors")
			col := tb.Col("bytes_read_bytes")
			var read int64
			for _, row := range tb.Rows {
				if row[col].NA != "" {
					t.Fatalf("bytes_read_bytes is NA (%s)", row[col].NA)
				}
				read += row[col].I
			}
			t.Logf("dio: %d device bytes read for the tensors", read)
			if read < dataSize || read > total+slack {
				t.Errorf("dio: %d device bytes read for the tensors, %d bytes of tensors, %d requested", read, dataSize, total)
			}
		})
	}
}
