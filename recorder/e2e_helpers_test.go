package recorder

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/index"
	"github.com/iocorr/iocorr/internal/llmtest"
	"github.com/iocorr/iocorr/internal/spooltest"
	"github.com/iocorr/iocorr/internal/testenv"
	"github.com/iocorr/iocorr/pipeline"
)

// The end-to-end tests of this package record as `iocorr record` does:
// Run with the CLI's defaults, then the one ingest (pipeline.Ingest), and
// read the run's store through index, as `query` and `export` do.

// syncBuffer is the command's and the recorder's output, written by both
// at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// recordAndIngest is `iocorr record -o dir [set's options] -- argv` (or
// `-p`, when set gives a PID): the recording, then the store. It returns
// what the command and the recorder said, and the first error.
func recordAndIngest(ctx context.Context, dir string, argv []string, set func(o *Options)) (string, error) {
	var out syncBuffer
	o := Options{Dir: dir, Argv: argv, RingBufBytes: bpf.DefaultRingBufBytes, Stdout: &out, Stderr: &out}
	if set != nil {
		set(&o)
	}
	if _, err := Run(ctx, o); err != nil {
		return out.String(), err
	}
	// ctx ending is the recording's end (Ctrl-C), as for the CLI, not
	// the store's.
	if _, err := pipeline.Ingest(context.WithoutCancel(ctx), dir, pipeline.Options{}); err != nil {
		return out.String(), err
	}
	return out.String(), nil
}

// recordAttachedFor is `iocorr record -o dir -p pid --duration d`.
func recordAttachedFor(ctx context.Context, dir string, pid int, d time.Duration) (string, error) {
	return recordAndIngest(ctx, dir, nil, func(o *Options) { o.PID, o.Duration = pid, d })
}

// recordableMoE is what the end-to-end tests of an MoE run start from:
// tracing and real llama.cpp available, llmtest.MoE written, and its
// tensor table.
func recordableMoE(t *testing.T) (model string, f *gguf.File) {
	t.Helper()
	testenv.RequireBPF(t)
	llmtest.Require(t)
	model = llmtest.Model(t, llmtest.MoE)
	f, err := gguf.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	return model, f
}

// countDecodeCalls counts the llama_decode calls of a run's spool by
// phase (a call of more than one token is the prefill) and checks every
// graph node's weight offset against f.
func countDecodeCalls(t *testing.T, dir string, f *gguf.File) (prefill, decode int) {
	t.Helper()
	weights := map[string]bool{}
	spooltest.Events(t, dir, func(typ uint16, rec []byte) {
		switch uint32(typ) {
		case uint32(bpf.IocorrEventTypeEV_DECODE_BEGIN):
			if spooltest.Decoded(t, rec).Decode().N_tokens > 1 {
				prefill++
			} else {
				decode++
			}
		case uint32(bpf.IocorrEventTypeEV_NODE):
			spooltest.CheckWeightOffset(t, f, spooltest.Decoded(t, rec).Node(), weights)
		}
	})
	return prefill, decode
}

// queryRows runs q on the run's store, as `iocorr query` does.
func queryRows(t *testing.T, dir string, q index.Query) []index.Row {
	t.Helper()
	st, err := index.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rows, err := st.Query(q)
	if err != nil {
		t.Fatalf("query %+v: %v", q, err)
	}
	return rows
}

// counterSums are counters by name, summed.
type counterSums map[string]uint64

func (s counterSums) add(c *event.Counters) {
	for _, d := range event.CounterFields {
		s[d.Name] += *d.Field(c)
	}
}

// rowSums are a query's rows' counters by the rows' keys.
func rowSums(rows []index.Row) map[string]counterSums {
	out := map[string]counterSums{}
	for i := range rows {
		if out[rows[i].Key] == nil {
			out[rows[i].Key] = counterSums{}
		}
		out[rows[i].Key].add(&rows[i].Counters)
	}
	return out
}

// runTokens are the run's tokens, as `export faults-per-token` reads them.
func runTokens(t *testing.T, dir string) []event.TokenInfo {
	t.Helper()
	st, err := index.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	toks, err := st.Tokens()
	if err != nil {
		t.Fatal(err)
	}
	return toks
}
