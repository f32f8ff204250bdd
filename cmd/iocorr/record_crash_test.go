//go:build linux && !noloader

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iocorr/iocorr/correlate"
	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/internal/cgroup"
	"github.com/iocorr/iocorr/internal/launch"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/storetest"
	"github.com/iocorr/iocorr/wire"
)

// decodeCalls counts the llama_decode calls in a spool that is still being
// written (its tail may be torn).
func decodeCalls(dir string) int {
	r, err := ingest.OpenSpool(filepath.Join(dir, rundir.SpoolFile))
	if err != nil {
		return 0
	}
	defer r.Close()
	n := 0
	for {
		rec, err := r.Next()
		if err != nil {
			return n
		}
		if ingest.RecordType(rec) == uint16(wire.EventTypeEV_DECODE_BEGIN) {
			n++
		}
	}
}

// processGone waits until pid no longer runs (gone, or a zombie whose
// parent has not reaped it yet).
func processGone(pid int, within time.Duration) bool {
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		if i := bytes.LastIndexByte(b, ')'); i > 0 && i+2 < len(b) && b[i+2] == 'Z' {
			return true
		}
	}
	return false
}

// oomKills reads how many processes of a memory cgroup the OOM killer
// killed (v1 memory.oom_control, v2 memory.events).
func oomKills(t *testing.T, cg *cgroup.Cgroup) uint64 {
	t.Helper()
	file := "memory.oom_control"
	if cg.Version == 2 {
		file = "memory.events"
	}
	b, err := os.ReadFile(filepath.Join(cg.Path, file))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", file, line, err)
			}
			return n
		}
	}
	t.Fatalf("%s has no oom_kill line:\n%s", file, b)
	return 0
}

// tensorTotals sums counters per tensor name.
func tensorTotals(tensors []event.Tensor, aggs []event.Agg) map[string]event.Counters {
	out := map[string]event.Counters{}
	for _, a := range aggs {
		name := tensors[a.Tensor].Name
		c := out[name]
		c.Add(&a.Counters)
		out[name] = c
	}
	return out
}

// TestRecordKilledMidRunLeavesARunThatIngestAttributes kills `iocorr
// record` while llama.cpp generates under memory pressure — with SIGKILL,
// and by the OOM killer of a memory cgroup the recorder runs in — and
// checks what the run directory still says: a meta.json with the model,
// marked unfinished, and a spool that ingest attributes to the model's
// tensors exactly as correlating it directly does.
func TestRecordKilledMidRunLeavesARunThatIngestAttributes(t *testing.T) {
	requireBPF(t)
	llmtest.Require(t)
	// About 100 MB of MoE weights under a 96 MiB limit: every token reads
	// experts back from the disk, so the run lasts seconds.
	model := llmtest.Model(t, llmtest.MoE)
	for _, how := range []string{"SIGKILL", "OOM"} {
		t.Run(how, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			llama := llmtest.Command(context.Background(), model, llmtest.Generation{Tokens: 200, Threads: 2, JSON: true})
			rec := exec.Command(os.Args[0], append([]string{"-test.run=^TestHelperProcess$", "--",
				"record", "-o", dir, "--no-ingest", "--cold", "--mem-limit", "96MiB", "--"}, llama.Args...)...)
			rec.Env = append(os.Environ(), helperEnv+"=record")
			out := launch.Share(&bytes.Buffer{})
			rec.Stdout, rec.Stderr = out, out
			var own *cgroup.Cgroup
			if how == "OOM" {
				// The recorder grows steadily: a limit set just above its
				// usage is soon too small.
				rec.Env = append(rec.Env, growEnv+"=1")
				var err error
				if own, err = cgroup.NewMemory(fmt.Sprintf("iocorr-test-recorder-%d", os.Getpid()), 1<<30); err != nil {
					t.Fatal(err)
				}
				defer own.Remove()
			}
			if err := rec.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- rec.Wait() }()
			defer rec.Process.Kill()
			if own != nil {
				if err := own.Add(rec.Process.Pid); err != nil {
					t.Fatal(err)
				}
			}

			// Wait for the model to be mapped and tokens to flow.
			var m *rundir.Meta
			for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
				select {
				case err := <-exited:
					t.Fatalf("the recording ended (%v) before it could be killed:\n%s", err, out.Bytes())
				default:
				}
				if time.Since(start) > 2*time.Minute {
					t.Fatalf("no model mapped and tokens decoded within 2 minutes:\n%s", out.Bytes())
				}
				var err error
				if m, err = rundir.ReadMeta(dir); err != nil || len(m.Models) == 0 || len(m.Maps) == 0 {
					continue
				}
				if decodeCalls(dir) >= 3 {
					break
				}
			}
			if cg := m.Controls.Cgroup; cg != "" {
				// The recorder died before it could remove the command's
				// cgroup.
				defer (&cgroup.Cgroup{Path: cg}).Remove()
			}
			switch how {
			case "SIGKILL":
				if err := rec.Process.Kill(); err != nil {
					t.Fatal(err)
				}
			case "OOM":
				usageFile, limitFile := "memory.usage_in_bytes", "memory.limit_in_bytes"
				if own.Version == 2 {
					usageFile, limitFile = "memory.current", "memory.max"
				}
				usage, err := os.ReadFile(filepath.Join(own.Path, usageFile))
				if err != nil {
					t.Fatal(err)
				}
				n, err := strconv.ParseInt(strings.TrimSpace(string(usage)), 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(own.Path, limitFile), []byte(strconv.FormatInt(n+(8<<20), 10)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var werr error
			select {
			case werr = <-exited:
			case <-time.After(time.Minute):
				t.Fatalf("the recorder was not killed within a minute:\n%s", out.Bytes())
			}
			var ee *exec.ExitError
			if !errors.As(werr, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("the recorder ended with %v, want killed by SIGKILL:\n%s", werr, out.Bytes())
			}
			if own != nil {
				if n := oomKills(t, own); n != 1 {
					t.Errorf("the recorder's cgroup counts %d OOM kills, want 1", n)
				}
			}
			// The parent-death signal took the command with it.
			if !processGone(m.Child.PID, 10*time.Second) {
				syscall.Kill(m.Child.PID, syscall.SIGKILL)
				t.Fatalf("the command (pid %d) outlived its recorder", m.Child.PID)
			}

			if _, errOut, err := runCmd(t, "ingest", dir); err != nil {
				t.Fatalf("ingest: %v\n%s", err, errOut)
			}
			m, err := rundir.ReadMeta(dir)
			if err != nil {
				t.Fatal(err)
			}
			if m.Finished || m.Complete || !strings.Contains(m.Status(), "did not finish") {
				t.Errorf("finished %v, complete %v, status %q", m.Finished, m.Complete, m.Status())
			}
			if len(m.Models) != 1 || len(m.Models[0].Tensors) == 0 || len(m.Models[0].Extents) == 0 || len(m.Libraries) == 0 {
				t.Fatalf("meta.json lacks what was known: %d models, %d libraries", len(m.Models), len(m.Libraries))
			}

			// What correlating the spool directly attributes...
			cor, err := correlate.NewRun(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := cor.AddSpool(context.Background(), filepath.Join(dir, rundir.SpoolFile)); err != nil {
				t.Fatal(err)
			}
			res, err := cor.Finish()
			if err != nil {
				t.Fatal(err)
			}
			want := tensorTotals(res.Tensors, res.Aggs)
			// ... is what the store says, tensor by tensor.
			st := storetest.Open(t, dir)
			rows, err := st.Query(store.Query{By: "tensor", Pseudos: true})
			if err != nil {
				t.Fatal(err)
			}
			var exps, dense event.Counters
			got := map[string]bool{}
			for _, r := range rows {
				got[r.Key] = true
				if r.Counters != want[r.Key] {
					t.Errorf("%s: store %+v, spool %+v", r.Key, r.Counters, want[r.Key])
				}
				switch {
				case strings.HasSuffix(r.Key, "_exps.weight"):
					exps.Add(&r.Counters)
				case strings.HasSuffix(r.Key, ".weight"):
					dense.Add(&r.Counters)
				}
			}
			for name, c := range want {
				if !got[name] && c != (event.Counters{}) {
					t.Errorf("%s: %+v from the spool, not in the store", name, c)
				}
			}
			if exps.Faults == 0 || exps.ReadBytes == 0 || dense.Faults == 0 || dense.ReadBytes == 0 {
				t.Errorf("experts %+v, other weights %+v: want faults and bytes read on both", exps, dense)
			}
			t.Logf("%d tokens recorded; experts: %d faults (%d major), %d bytes read; other weights: %d faults, %d bytes read",
				len(res.Tokens), exps.Faults, exps.Major, exps.ReadBytes, dense.Faults, dense.ReadBytes)
		})
	}
}
