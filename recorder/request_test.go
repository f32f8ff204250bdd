package recorder_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/iocorr/iocorr/testkit/storetest"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/internal/cgroup"
	"github.com/iocorr/iocorr/internal/pagecache"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/rectest"
)

// served is what llama-server says of one completion: the slot (its
// sequence id) and the tokens it evaluated and predicted.
type served struct {
	Slot    int `json:"id_slot"`
	Timings struct {
		PromptN    int `json:"prompt_n"`
		PredictedN int `json:"predicted_n"`
	} `json:"timings"`
}

// completeServed sends one completion, bounded in time, without the
// prompt cache (each request evaluates its whole prompt), and returns the
// server's account of it.
func completeServed(ctx context.Context, base, prompt string, nPredict int) (served, error) {
	var s served
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "n_predict": nPredict, "temperature": 0,
		"cache_prompt": false, "ignore_eos": true})
	ctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/completion", bytes.NewReader(body))
	if err != nil {
		return s, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("status %d: %.200s", resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, &s); err != nil || s.Timings.PredictedN == 0 {
		return s, fmt.Errorf("unreadable completion (%v): %.300s", err, b)
	}
	return s, nil
}

// startServer starts llama-server on a loopback port with args, in
// cgroup cg when it is set, and waits until it is healthy: its base URL,
// pid and output. It is killed when the test ends.
func startServer(t *testing.T, cg *cgroup.Cgroup, model string, args ...string) (string, int, *bytes.Buffer) {
	t.Helper()
	server := llmtest.CLI(t, llmtest.Shared, "llama-server")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	srv := exec.Command(server, append([]string{"-m", model, "--host", "127.0.0.1", "--port", strconv.Itoa(port), "-t", "2", "--no-warmup"}, args...)...)
	var srvLog bytes.Buffer
	srv.Stdout, srv.Stderr = &srvLog, &srvLog
	if cg != nil && cg.Version == 2 {
		// Born in the cgroup: the model's pages are charged to it from
		// the first fault.
		dirf, err := os.Open(cg.Path)
		if err != nil {
			t.Fatal(err)
		}
		defer dirf.Close()
		srv.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dirf.Fd())}
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if cg != nil && cg.Version != 2 {
		if err := cg.Add(srv.Process.Pid); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		srv.Process.Kill()
		srv.Wait()
	})
	waitHealthy(t, base, &srvLog)
	return base, srv.Process.Pid, &srvLog
}

// waitHealthy waits up to 90 s for the llama-server at base to answer
// /health, and fails the test with its log if it does not.
func waitHealthy(t *testing.T, base string, log *bytes.Buffer) {
	t.Helper()
	for deadline := time.Now().Add(90 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/health", nil)
		resp, err := http.DefaultClient.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("llama-server did not become healthy in 90s:\n%s", log.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestRecordAttachedToLlamaServerChargesEachRequestItsOwn records a
// llama-server with two slots attached while it answers two concurrent
// completions, and checks the per-request attribution against the
// server's own account and the run's totals: the llama_decode calls whose
// batch holds a request's sequence are the tokens the server says it
// evaluated for it (its prompt in one batch, then one per predicted token
// but the last, which is sampled and never decoded); the rows of `query
// --by request` sum to the per-token export's totals, counter by counter,
// and their major faults to the server's own majflt delta over the window. The server
// runs under the memory limit, the model evicted first, so that decode
// re-reads weights and the faults and reads are there to attribute. A
// batch of both requests is split between them by their tokens in it, as
// the kernel counted them at llama_decode: each request's tokens summed
// over the run are those the server evaluated for it, and each request's
// row is its own tokens' counters plus its shares, recomputed exactly.
func TestRecordAttachedToLlamaServerChargesEachRequestItsOwn(t *testing.T) {
	tests := []struct{ name, without string }{
		{"the walk in bpf_loop", ""},
		// A kernel without bpf_loop: a bounded loop of SEQ_FALLBACK_TOKENS
		// tokens, more than both prompts together.
		{"the bounded walk, without bpf_loop", "bpf_loop"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(bpf.WithoutEnv, tc.without)
			model, _ := rectest.RecordableMoE(t)
			// Under the memory limit the model does not fit: decode re-reads
			// weights, so there are major faults and device reads to attribute.
			if _, _, err := pagecache.Evict(model); err != nil {
				t.Fatal(err)
			}
			cg, err := cgroup.NewMemory(fmt.Sprintf("iocorr-test-server-%d", os.Getpid()), llmtest.MemLimitBytes)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cg.Remove() }) // after the server's own cleanup has killed it
			base, pid, _ := startServer(t, cg, model, "--parallel", "2", "-c", "1024")
			dir := filepath.Join(t.TempDir(), "run")
			// The recording ends when both requests are answered (as Ctrl-C
			// ends record -p), or at the window's end on a machine too slow.
			const window = 120 * time.Second
			ctx, endRecording := context.WithCancel(t.Context())
			defer endRecording()
			done := recordAttached(ctx, t, dir, pid, window, 30*time.Second)
			attached := time.Now()
			prompts := []string{"the quick brown fox jumps over", "once upon a time in a land far away there lived"}
			got := make([]served, len(prompts))
			errs := make([]error, len(prompts))
			var wg sync.WaitGroup
			for i, p := range prompts {
				wg.Add(1)
				go func() {
					defer wg.Done()
					got[i], errs[i] = completeServed(context.Background(), base, p, 6+4*i)
				}()
			}
			wg.Wait()
			answered := time.Since(attached)
			endRecording()
			r := <-done
			if r.err != nil {
				t.Fatalf("record -p: %v\n%s", r.err, r.out.Stderr)
			}
			for i, err := range errs {
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
			}
			if answered > window-time.Second {
				t.Fatalf("the requests took %v of a %v window: not all inside it", answered, window)
			}
			if got[0].Slot == got[1].Slot {
				t.Fatalf("both requests ran in slot %d: not concurrent", got[0].Slot)
			}

			toks := storetest.Tokens(t, dir)
			calls := map[int]int{}
			var shared int
			for _, tk := range toks {
				if tk.Token == 0 {
					continue
				}
				if tk.SeqState&event.SeqRead == 0 || tk.SeqState&(event.SeqWide|event.SeqPartial|event.SeqUncounted) != 0 {
					t.Errorf("token %d: sequence set %#x state %#x, want a complete read", tk.Token, tk.Seqs, tk.SeqState)
				}
				for s := range 64 {
					if tk.Seqs&(1<<s) != 0 {
						calls[s]++
					}
				}
				if tk.Request() == event.RequestShared {
					shared++
				}
			}
			// The kernel's tokens per sequence against the server's account:
			// its prompt, then one per predicted token but the last.
			for i, s := range got {
				var n int
				for _, tk := range toks {
					if tk.Token != 0 && s.Slot < event.SeqCounted {
						n += int(tk.SeqTokens[s.Slot])
					}
				}
				if want := s.Timings.PromptN + s.Timings.PredictedN - 1; n != want {
					t.Errorf("request %d (slot %d): the batches hold %d of its tokens, the server evaluated %d prompt and %d predicted: want %d",
						i, s.Slot, n, s.Timings.PromptN, s.Timings.PredictedN, want)
				}
			}
			for i, s := range got {
				want := 1 + s.Timings.PredictedN - 1
				if calls[s.Slot] != want {
					t.Errorf("request %d (slot %d, %d prompt tokens, %d predicted): %d llama_decode calls hold its sequence, want %d",
						i, s.Slot, s.Timings.PromptN, s.Timings.PredictedN, calls[s.Slot], want)
				}
			}
			if shared == 0 {
				t.Errorf("no batch held both requests: they were not in flight together (calls per sequence %v)", calls)
			}

			// The per-request rows against the per-token export, counter by counter.
			byReq := rowSums(storetest.Query(t, dir, store.Query{By: "request", Pseudos: true}))
			byTokRow := tokenSums(storetest.Tokens(t, dir))
			total := counterSums{}
			for _, sums := range byReq {
				for c, v := range sums {
					total[c] += v
				}
			}
			for _, c := range event.CounterFields {
				var want uint64
				measured := false
				for _, sums := range byTokRow {
					if v, ok := sums[c.Name]; ok {
						want += v
						measured = true
					}
				}
				if measured && total[c.Name] != want {
					t.Errorf("%s: the request rows sum to %d, the per-token export to %d", c.Name, total[c.Name], want)
				}
			}
			// Each request's row is its own tokens' counters plus its share of
			// every batch it shared, split by its tokens in the batch: the
			// shares recomputed here from the per-token export, in exact
			// arithmetic.
			want := map[string]counterSums{}
			for req, sums := range byTokRow {
				if req == event.RequestShared {
					continue
				}
				want[req] = counterSums{}
				for c, v := range sums {
					want[req][c] += v
				}
			}
			for _, tk := range toks {
				if tk.Request() != event.RequestShared {
					continue
				}
				var seqs []int
				var weights []uint64
				for s := range event.SeqCounted {
					if tk.Seqs&(1<<s) != 0 {
						seqs = append(seqs, s)
						weights = append(weights, uint64(tk.SeqTokens[s]))
					}
				}
				if slices.Contains(weights, 0) {
					t.Errorf("token %d: sequences %#x, tokens per sequence %v: a sequence of the batch has no token counted", tk.Token, tk.Seqs, tk.SeqTokens)
					continue
				}
				for _, c := range event.CounterFields {
					for i, part := range largestRemainder(*c.Field(&tk.Counters), weights) {
						key := strconv.Itoa(seqs[i])
						if want[key] == nil {
							want[key] = counterSums{}
						}
						want[key][c.Name] += part
					}
				}
			}
			for req, sums := range want {
				for c, v := range sums {
					if byReq[req][c] != v {
						t.Errorf("request %s: %s %d in the query, %d its own and its shares in the per-token export", req, c, byReq[req][c], v)
					}
				}
			}
			m, err := rundir.ReadMeta(dir)
			if err != nil {
				t.Fatal(err)
			}
			if delta := m.Attached.MajFltAfter - m.Attached.MajFltBefore; total["major_faults"] != delta || delta == 0 {
				t.Errorf("the request rows hold %d major faults, the server's majflt rose by %d in the window: want equal, not 0", total["major_faults"], delta)
			}
			// Every token's sequences were read whole and counted: no row is
			// "shared" or another pseudo request but the load's.
			for key := range byReq {
				n, err := strconv.Atoi(key)
				if err == nil && n != got[0].Slot && n != got[1].Slot {
					t.Errorf("a row for request %s, which no request ran in (slots %d and %d)", key, got[0].Slot, got[1].Slot)
				}
				if err != nil && key != event.RequestNone {
					t.Errorf("a row for pseudo request %s: every token's sequences were read and counted", key)
				}
			}
			t.Logf("calls per sequence %v (%d shared); server %+v; rows (--all) %v; the model's tensors: %+v", calls, shared, got, byReq,
				storetest.Query(t, dir, store.Query{By: "request"}))
		})
	}
}

// largestRemainder splits v by weights in whole units, in exact
// arithmetic: each part its exact share rounded down, then one unit
// each to the largest remainders (the earlier part on a tie) until the
// parts sum to v.
func largestRemainder(v uint64, weights []uint64) []uint64 {
	total := new(big.Int)
	for _, w := range weights {
		total.Add(total, new(big.Int).SetUint64(w))
	}
	parts := make([]uint64, len(weights))
	rems := make([]*big.Int, len(weights))
	left := new(big.Int).SetUint64(v)
	for i, w := range weights {
		q, r := new(big.Int).QuoRem(new(big.Int).Mul(new(big.Int).SetUint64(v), new(big.Int).SetUint64(w)), total, new(big.Int))
		parts[i], rems[i] = q.Uint64(), r
		left.Sub(left, q)
	}
	for n := left.Uint64(); n > 0; n-- {
		best := -1
		for i, r := range rems {
			if r != nil && (best < 0 || r.Cmp(rems[best]) > 0) {
				best = i
			}
		}
		parts[best]++
		rems[best] = nil
	}
	return parts
}

// tokenSums sums the tokens' counters by their request, as the
// per-token export's request column names it.
func tokenSums(toks []event.TokenInfo) map[string]counterSums {
	out := map[string]counterSums{}
	for i := range toks {
		k := toks[i].Request()
		if out[k] == nil {
			out[k] = counterSums{}
		}
		out[k].add(&toks[i].Counters)
	}
	return out
}

// TestRecordOfACompletionChargesEveryTokenToSequenceZero: llama-completion
// decodes llama_batch_get_one batches, which have no seq_id array and are
// sequence 0 to llama.cpp: every token of the run is request 0, read as
// such, and `query --by request` has that one row besides the load's.
func TestRecordOfACompletionChargesEveryTokenToSequenceZero(t *testing.T) {
	model, _ := rectest.RecordableMoE(t)
	bin := llmtest.CLI(t, llmtest.Shared, "llama-completion")
	dir := filepath.Join(t.TempDir(), "run")
	const n = 4
	rectest.Record(t, dir, rectest.Options{}, llmtest.CompletionArgs(bin, model, n)...)
	toks := storetest.Tokens(t, dir)
	decoded := 0
	for _, tk := range toks {
		if tk.Token == 0 {
			continue
		}
		decoded++
		if tk.Seqs != 1 || tk.SeqState != event.SeqRead|event.SeqDefault || tk.Request() != "0" {
			t.Errorf("token %d: sequences %#x state %#x (request %s), want sequence 0 of a batch without seq_id",
				tk.Token, tk.Seqs, tk.SeqState, tk.Request())
		}
	}
	if decoded != n {
		t.Errorf("%d tokens, want %d llama_decode calls", decoded, n)
	}
	for key := range rowSums(storetest.Query(t, dir, store.Query{By: "request", Pseudos: true})) {
		if key != "0" && key != event.RequestNone {
			t.Errorf("a row for request %s", key)
		}
	}
}
