package recorder_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/iocorr/iocorr/internal/proc"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/rectest"
)

// complete sends one completion request to a llama-server, bounded in
// time: its status, or an error.
func complete(ctx context.Context, base string, nPredict int) error {
	body := fmt.Sprintf(`{"prompt": "the quick brown fox", "n_predict": %d, "temperature": 0}`, nPredict)
	ctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/completion", bytes.NewBufferString(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(`"content"`)) {
		return fmt.Errorf("status %d: %.200s", resp.StatusCode, b)
	}
	return nil
}

// TestRecordAttachedToLlamaServerRecordsEveryDecodeCallInTheWindow starts
// llama-server on a loopback port, keeps completion requests coming, and
// attaches `record -p --duration` to it while it answers. bpftrace stamps
// each llama_decode call of the server: the run holds exactly those made
// inside its window, and the server still answers after the detach.
func TestRecordAttachedToLlamaServerRecordsEveryDecodeCallInTheWindow(t *testing.T) {
	model, f := rectest.RecordableMoE(t)
	bt, err := exec.LookPath("bpftrace")
	if err != nil {
		t.Fatalf("bpftrace (make setup): %v", err)
	}
	lib := filepath.Join(llmtest.SharedLibDir(t), "libllama.so")
	base, pid, srvLog := startServer(t, nil, model, "-c", "512")

	sc, interruptTrace := stampDecodeCalls(t, bt, lib, pid)
	calls := make(chan []uint64, 1)
	started := make(chan struct{})
	go func() {
		var ts []uint64
		for sc.Scan() {
			if v, err := strconv.ParseUint(sc.Text(), 10, 64); err == nil {
				if ts = append(ts, v); len(ts) == 4 {
					close(started)
				}
			}
		}
		calls <- ts
	}()

	// Requests keep coming until the recording is over.
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var reqErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if err := complete(ctx, base, 24); err != nil && ctx.Err() == nil {
				reqErr = err
				return
			}
		}
	}()
	select {
	case <-started:
	case <-time.After(60 * time.Second):
		stop()
		t.Fatalf("llama-server made no 4 llama_decode calls in 60s:\n%s", srvLog.String())
	}
	dir := filepath.Join(t.TempDir(), "run")
	out, err := rectest.RecordAttachedErr(context.Background(), dir, pid, 3*time.Second)
	stop()
	wg.Wait()
	if err != nil {
		t.Fatalf("record -p: %v\n%s", err, out.Stderr)
	}
	if reqErr != nil {
		t.Errorf("a request while recording failed: %v", reqErr)
	}
	// Unharmed: it answers after the detach.
	if err := complete(context.Background(), base, 4); err != nil {
		t.Errorf("llama-server after the detach: %v\n%s", err, srvLog.String())
	}
	if st, err := proc.ReadStat(pid); err != nil || st.State == 'T' || st.State == 't' || st.State == 'Z' {
		t.Errorf("llama-server after the detach: state %c (%v)", st.State, err)
	}
	interruptTrace()
	ts := <-calls
	m, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	inWindow := 0
	for _, v := range ts {
		if v >= m.MonoStartNS && v <= m.MonoEndNS {
			inWindow++
		}
	}
	prefill, decode := rectest.CountDecodeCalls(t, dir, f, nil, nil)
	if prefill+decode != inWindow || inWindow == 0 {
		t.Errorf("recorded %d llama_decode calls, bpftrace saw the server make %d in the window (of %d)", prefill+decode, inWindow, len(ts))
	}
	if m.Attached == nil || m.Attached.Exited || len(m.Models) != 1 || m.Layout == nil || m.Layout.Invalid != "" {
		t.Errorf("attached %+v, %d models, layout %+v: want the server attached, its model found, a valid layout", m.Attached, len(m.Models), m.Layout)
	}
	t.Logf("window %.2fs: %d llama_decode calls (%d prefill), bpftrace %d of %d; %d pauses held",
		float64(m.MonoEndNS-m.MonoStartNS)/1e9, prefill+decode, prefill, inWindow, len(ts), m.Pauses.Held)
}
