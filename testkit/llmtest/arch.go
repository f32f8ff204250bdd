package llmtest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iocorr/iocorr/internal/atomicfile"
)

// Quantized returns model quantized to ftype by llama.cpp's own
// llama-quantize of the Shared build (ftype as llama-quantize names it:
// Q4_K_M, Q6_K, IQ4_XS, Q8_0, MXFP4_MOE), skipping or failing like CLI
// when that build is missing. The file is written once beside the shared
// model of which model is this test binary's copy, in .testmodels, whose
// name already says which code wrote model (and the binary reads its own
// copy of it, as of Model's), and is
// published by atomicfile with sync: a model dirty in the page cache
// cannot be evicted for a cold run. Its temporary name carries the pid:
// test binaries of several packages may quantize the same model at once.
func Quantized(t testing.TB, model, ftype string) string {
	t.Helper()
	return QuantizedAs(t, model, ftype, ftype)
}

// QuantizedAs is Quantized with more of llama-quantize's options (args,
// before ftype, such as --tensor-type attn=bf16): name, which names the
// file beside model, must say what they make different.
func QuantizedAs(t testing.TB, model, name, ftype string, args ...string) string {
	t.Helper()
	bin := CLI(t, Shared, "llama-quantize")
	modelsMu.Lock()
	defer modelsMu.Unlock()
	if s, ok := shared[model]; ok {
		model = s
	}
	out := strings.TrimSuffix(model, ".gguf") + "-" + strings.ToLower(name) + ".gguf"
	if own, ok := models[out]; ok {
		return own
	}
	if _, err := os.Stat(out); err == nil {
		now := time.Now()
		os.Chtimes(out, now, now)
		return ownModel(t, out)
	}
	tmp := out + fmt.Sprintf(".tmp%d", os.Getpid())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The model's tensors are already of one type: llama-quantize refuses
	// to quantize quantized tensors again without --allow-requantize.
	argv := append(append([]string{"--allow-requantize"}, args...), model, tmp, ftype, "2")
	cmd := exec.CommandContext(ctx, bin, argv...)
	if b, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		t.Fatalf("llama-quantize %s %s: %v\n%s", filepath.Base(model), strings.Join(append(args, ftype), " "), err, b)
	}
	if err := atomicfile.Publish(tmp, out, 0o644, true); err != nil {
		t.Fatal(err)
	}
	return ownModel(t, out)
}

// BuildRouteOracle compiles testdata/routeoracle against the public
// headers and libllama of the Shared build (skipping or failing like CLI
// when it is missing), with a RUNPATH to that build's libraries, and
// syncs the binary before anything probes it.
func BuildRouteOracle(t testing.TB) string {
	t.Helper()
	lib := SharedLibDir(t)
	inc := filepath.Join(filepath.Dir(lib), "include")
	if _, err := os.Stat(filepath.Join(inc, "llama.h")); err != nil {
		missing(t, "llama.cpp built from source", fmt.Errorf("no public headers in the shared build: %w", err))
	}
	return buildC(t, "routeoracle", "-I"+inc, "-L"+lib, "-lllama", "-lggml", "-lggml-base", "-Wl,-rpath,"+lib)
}

// BuildDriverAlloc compiles testdata/driveralloc, the LD_PRELOAD
// allocator that puts ggml's CPU buffers in the kinds of shared mappings
// a GPU driver makes (see its source for DRIVERALLOC's kinds).
func BuildDriverAlloc(t testing.TB) string {
	t.Helper()
	return buildC(t, "driveralloc", "-shared", "-fPIC", "-lpthread")
}

// RouteOracleArgs is the oracle's command line generating n tokens on
// model (n llama_decode calls: the prompt, then one per further token)
// on 2 threads; noRepack keeps every weight in the model's mapping.
func RouteOracleArgs(bin, model string, n int, noRepack bool) []string {
	args := []string{bin, "-m", model, "-n", strconv.Itoa(n), "-t", "2", "-c", "256"}
	if noRepack {
		args = append(args, "--no-repack")
	}
	return args
}

// Routing is what the oracle printed: per llama_decode call (from 1, as
// iocorr numbers tokens), its tokens and each MoE layer's rows of expert
// ids, in row order.
type Routing struct {
	PromptTokens int
	Calls        map[uint32]*RoutedCall
}

// RoutedCall is one llama_decode call's routing.
type RoutedCall struct {
	Tokens int
	Rows   map[int][][]int32 // layer → rows
}

// ParseRouting reads the oracle's output (see routeoracle.c); anything
// but its three kinds of line, in order, is an error.
func ParseRouting(out []byte) (Routing, error) {
	r := Routing{Calls: map[uint32]*RoutedCall{}}
	done := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || (f[0] != "decode" && f[0] != "topk" && f[0] != "done") {
			return r, fmt.Errorf("line %d: %q is no line of the oracle's", n, sc.Text())
		}
		nums := make([]int64, 0, len(f))
		for _, s := range f[min(1, len(f)):] {
			v, err := strconv.ParseInt(s, 10, 32)
			if err != nil {
				return r, fmt.Errorf("line %d: %q: %w", n, sc.Text(), err)
			}
			nums = append(nums, v)
		}
		switch {
		case len(f) == 3 && f[0] == "decode":
			r.Calls[uint32(nums[0])] = &RoutedCall{Tokens: int(nums[1]), Rows: map[int][][]int32{}}
		case len(f) >= 5 && f[0] == "topk":
			c := r.Calls[uint32(nums[0])]
			if c == nil {
				return r, fmt.Errorf("line %d: ids of call %d before its decode line", n, nums[0])
			}
			layer, row := int(nums[1]), int(nums[2])
			if row != len(c.Rows[layer]) {
				return r, fmt.Errorf("line %d: row %d of layer %d after %d rows", n, row, layer, len(c.Rows[layer]))
			}
			ids := make([]int32, 0, len(nums)-3)
			for _, v := range nums[3:] {
				ids = append(ids, int32(v))
			}
			c.Rows[layer] = append(c.Rows[layer], ids)
		case len(f) == 3 && f[0] == "done":
			r.PromptTokens = int(nums[0])
			if int(nums[1]) != len(r.Calls) {
				return r, fmt.Errorf("the oracle says %d calls and printed %d", nums[1], len(r.Calls))
			}
			done = true
		default:
			return r, fmt.Errorf("line %d: %q is no line of the oracle's", n, sc.Text())
		}
	}
	if !done {
		return r, fmt.Errorf("the oracle's output ends before its done line")
	}
	return r, nil
}
