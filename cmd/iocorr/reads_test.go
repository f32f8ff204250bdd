package main

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"unsafe"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/internal/llmtest"
)

type readSpec struct {
	kind      string // the reader's name of the call
	off, n    int64
	want      bpf.IocorrReadKind
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

// queryRequested is bytes_requested per tensor as iocorr query prints it.
func queryRequested(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	got := map[string]int64{}
	for _, r := range jsonRows(t, "query", "-i", dir, "--by", "tensor") {
		if v, _ := jsonUint(t, r["bytes_requested"]); v > 0 {
			got[r["tensor"].(string)] = int64(v)
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
	requireBPF(t)
	reader := llmtest.BuildReader(t)
	model, f := pageableMoE(t)
	up := f.Tensor("blk.0.ffn_up_exps.weight")
	lo1, _ := up.ExpertRange(1)
	specs := []readSpec{
		{"read", f.DataOffset, 10000, bpf.IocorrReadKindREAD_READ, false},
		{"pread64", lo1, 65536, bpf.IocorrReadKindREAD_PREAD64, false},
		{"readv", lo1 + 4096, 12345, bpf.IocorrReadKindREAD_READV, false},
		{"preadv", up.FileOffset, 3 * 4096, bpf.IocorrReadKindREAD_PREADV, false},
		{"preadv2", up.FileOffset + up.Size - 5000, 9000, bpf.IocorrReadKindREAD_PREADV2, false}, // across a tensor boundary
		{"preadv2cur", f.DataOffset + 777, 4321, bpf.IocorrReadKindREAD_PREADV2, false},
		{"uring", lo1 + 100000, 20000, bpf.IocorrReadKindREAD_IO_URING, false},
	}
	args := []string{"record", "-o", filepath.Join(t.TempDir(), "run"), "--model", model, "--", reader, model}
	for _, s := range specs {
		args = append(args, fmt.Sprintf("%s:%d:%d", s.kind, s.off, s.n))
	}
	dir := args[2]
	if _, errOut, err := runCmd(t, args...); err != nil {
		t.Fatalf("record: %v\n%s", err, errOut)
	}
	var got []string
	spoolEvents(t, dir, func(typ uint16, rec []byte) {
		if uint32(typ) == uint32(bpf.IocorrEventTypeEV_READ) {
			e := (*bpf.IocorrReadEvent)(unsafe.Pointer(&rec[0]))
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
	if g, w := queryRequested(t, dir), requestedByTensor(f, specs); fmt.Sprint(sortedMap(g)) != fmt.Sprint(sortedMap(w)) {
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
	requireBPF(t)
	llmtest.Require(t)
	model, f := pageableMoE(t)
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
			args := []string{"record", "-o", dir, "--cold", "--", llmtest.CLI(t, llmtest.Shared, "llama-completion"), "-m", model,
				"--load-mode", mode, "--lazy-mode", run.lazy, "-p", "hello", "-n", "2", "-no-cnv", "--no-warmup", "--ignore-eos", "-t", "2", "-c", "128"}
			if _, errOut, err := runCmd(t, args...); err != nil {
				t.Fatalf("record: %v\n%s", err, errOut)
			}
			req := queryRequested(t, dir)
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
			st := runStats(t, dir)
			var read int64
			for _, row := range st.Tables["tensors"] {
				read += num64(t, row, "bytes_read_bytes")
			}
			if read < dataSize || read > total+slack {
				t.Errorf("dio: %d device bytes read for the tensors, %d bytes of tensors, %d requested", read, dataSize, total)
			}
		})
	}
}
