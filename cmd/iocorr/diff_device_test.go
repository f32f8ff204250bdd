package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/storetest"
)

// deviceRunDir is a finished run whose tensor i lives on devices[i] (""
// where no probe placed it) and read 4096·(i+1) bytes in token 1.
func deviceRunDir(t *testing.T, devices ...string) string {
	dir := t.TempDir()
	tensors := slices.Clone(storetest.Pseudos)
	var aggs []event.Agg
	for i, d := range devices {
		id := uint32(3 + i)
		tensors = append(tensors, event.Tensor{ID: id, Name: "blk." + string(rune('0'+i)) + ".attn_q.weight", Layer: i, Device: d, Copied: d == "Vulkan0"})
		aggs = append(aggs, event.Agg{AggKey: event.AggKey{Token: 1, Tensor: id, Expert: -1},
			Counters: event.Counters{Faults: 1, Major: 1, ReadBytes: 4096 * uint64(i+1)}})
	}
	storetest.WriteResultRun(t, dir, event.Result{Tensors: tensors, Ops: []string{""}, Aggs: aggs,
		Tokens: []event.TokenInfo{{Token: 1, Phase: event.PhasePrefill}}},
		&rundir.Meta{Finished: true, Complete: true, Models: []rundir.ModelFile{{Path: "hybrid.gguf", Size: 1 << 20, Pages: 256}}})
	return dir
}

// TestDiffAndReportByDeviceOfAHybridRun: diff --by device puts each device
// of both runs side by side, NA where a run placed no weight on it; the
// report of the hybrid run has its devices table.
func TestDiffAndReportByDeviceOfAHybridRun(t *testing.T) {
	a := deviceRunDir(t, "Vulkan0", "CPU_Mapped")
	b := deviceRunDir(t, "CPU_Mapped", "CPU_Mapped")
	got := map[string]map[string]any{}
	for _, r := range jsonRows(t, "diff", "--by", "device", "--counter", "bytes_read", a, b) {
		got[r["device"].(string)] = r
	}
	if r := got["Vulkan0"]; r == nil || fmt.Sprint(r["a"]) != "4096" || r["b"] != nil || !strings.Contains(r["na_reason"].(string), "no weight of run B lived on this device") {
		t.Errorf("Vulkan0: %v, want A's 4096 bytes and B NA with the reason", r)
	}
	if r := got["CPU_Mapped"]; r == nil || fmt.Sprint(r["a"]) != "8192" || fmt.Sprint(r["b"]) != "12288" {
		t.Errorf("CPU_Mapped: %v, want 8192 in A and 12288 in B", r)
	}
	out := filepath.Join(t.TempDir(), "r.html")
	if _, _, err := runCmd(t, "report", "-i", a, "-o", out); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), "copied_at_load_weights") {
		t.Error("the hybrid run's report has no devices table")
	}
}
