package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/output"
	"github.com/iocorr/iocorr/report"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/stats"
	"github.com/iocorr/iocorr/testkit/storetest"
)

// placedRun is a finished run of four weights, one a layer, whose
// devices are known: layer 0's in Vulkan0 (copied there at load), layer
// 1's streamed from the mapping, layer 2's placed by no probe, layer 3's
// in a buffer whose name could not be read (copied there at load). Each
// weight faulted once in token 1 and was read by one block request.
func placedRun(t *testing.T) (dir string, names []string) {
	devices := []string{"Vulkan0", "CPU_Mapped", "", event.DeviceUnnamed}
	dir = t.TempDir()
	tensors := slices.Clone(storetest.Pseudos)
	var aggs []event.Agg
	var evs []event.Event
	for i, d := range devices {
		id := uint32(event.FirstTensor) + uint32(i)
		names = append(names, fmt.Sprintf("blk.%d.attn_q.weight", i))
		tensors = append(tensors, event.Tensor{ID: id, Model: 0, Name: names[i], Layer: i,
			Offset: int64(i) << 16, Size: 1 << 16, Device: d, Copied: d == "Vulkan0" || d == event.DeviceUnnamed})
		aggs = append(aggs, event.Agg{AggKey: event.AggKey{Token: 1, Tensor: id, Expert: -1},
			Counters: event.Counters{Faults: 1, Major: 1, ReadBytes: 4096}})
		ts := uint64(1000 + 10*i)
		evs = append(evs,
			event.Event{Ts: ts, Dur: 5, Bytes: 4096, Tensor: id, Token: 1, Expert: -1, Kind: event.KindFault, Phase: event.PhasePrefill, Class: event.ClassMajor},
			event.Event{Ts: ts + 1, Dur: 3, Bytes: 4096, Tensor: id, Token: 1, Expert: -1, Kind: event.KindBlock, Phase: event.PhasePrefill})
	}
	storetest.WriteEventsRun(t, dir, event.Result{Tensors: tensors, Ops: []string{""}, Aggs: aggs,
		Tokens: []event.TokenInfo{{Token: 1, Phase: event.PhasePrefill}}}, evs,
		&rundir.Meta{Finished: true, Complete: true, Models: []rundir.ModelFile{{Path: "hybrid.gguf", Size: 1 << 20, Pages: 256}}})
	return dir, names
}

// csvColumn reads a CSV file's column col, by row.
func csvColumn(t *testing.T, path, col string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	i := slices.Index(recs[0], col)
	if i < 0 {
		t.Fatalf("%s has no column %s: %q", path, col, recs[0])
	}
	var out []string
	for _, r := range recs[1:] {
		out = append(out, r[i])
	}
	return out
}

// readSidecar reads the .na.json sidecar at path.
func readSidecar(t *testing.T, path string) output.Sidecar {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var side output.Sidecar
	if err := json.Unmarshal(b, &side); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return side
}

// TestEveryOutputNamesEachWeightsDeviceAndWhyWhereItIsNone: the exports
// with a device column (a row per token and tensor, a row per event) name
// each weight's buffer as the store has it, and a weight placed by no
// probe or in a buffer of no readable name under its bracketed name, with
// why in the sidecar's values_na and on stderr; query --by device and
// --by layer say why too; stats' tensors table has the device, NA with
// the reason where there is none; the report's devices table keeps the
// copies seen into an unnamed buffer.
func TestEveryOutputNamesEachWeightsDeviceAndWhyWhereItIsNone(t *testing.T) {
	dir, names := placedRun(t)
	want := []string{"Vulkan0", "CPU_Mapped", event.DeviceUnknown, event.DeviceUnnamed}
	wantNA := map[string]string{event.DeviceUnknown: event.DeviceNA(event.DeviceUnknown), event.DeviceUnnamed: event.DeviceNA(event.DeviceUnnamed)}
	for _, tc := range []struct {
		kind string
		rows int // per weight
	}{
		{"faults-per-token-tensor", 1},
		{"events", 2},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "x.csv")
			_, errOut, err := runCmd(t, "export", tc.kind, "-i", dir, "--format", "csv", "-o", out)
			if err != nil {
				t.Fatalf("export: %v\n%s", err, errOut)
			}
			var wantCol []string
			for _, d := range want {
				for range tc.rows {
					wantCol = append(wantCol, d)
				}
			}
			if got := csvColumn(t, out, "device"); !slices.Equal(got, wantCol) {
				t.Errorf("device column %q, want %q", got, wantCol)
			}
			side := readSidecar(t, output.SidecarPath(out))
			if got := side.ValuesNA["device"]; len(got) != len(wantNA) || got[event.DeviceUnknown] != wantNA[event.DeviceUnknown] || got[event.DeviceUnnamed] != wantNA[event.DeviceUnnamed] {
				t.Errorf("sidecar values_na %q, want device: %q", side.ValuesNA, wantNA)
			}
			for d, why := range wantNA {
				if !strings.Contains(errOut, "device "+d+": "+why) {
					t.Errorf("stderr %q does not say why %s", errOut, d)
				}
			}
		})
	}
	t.Run("query by device", func(t *testing.T) {
		rows, errOut := jsonOut(t, "query", "-i", dir, "--by", "device")
		var keys []string
		for _, r := range rows {
			keys = append(keys, r["device"].(string))
		}
		// Named buffers first, then the weights of none.
		if !slices.Equal(keys, []string{"CPU_Mapped", "Vulkan0", event.DeviceUnknown, event.DeviceUnnamed}) {
			t.Errorf("devices %q", keys)
		}
		for d, why := range wantNA {
			if !strings.Contains(errOut, "device "+d+": "+why) {
				t.Errorf("stderr %q does not say why %s", errOut, d)
			}
		}
	})
	t.Run("query by layer", func(t *testing.T) {
		rows, errOut := jsonOut(t, "query", "-i", dir, "--by", "layer")
		if len(rows) != len(want) {
			t.Fatalf("%d layers, want %d: %v", len(rows), len(want), rows)
		}
		for i, r := range rows {
			if r["devices"] != want[i] {
				t.Errorf("layer %v: devices %v, want %s", r["layer"], r["devices"], want[i])
			}
		}
		if !strings.Contains(errOut, "device "+event.DeviceUnnamed+": ") {
			t.Errorf("stderr %q does not say why %s", errOut, event.DeviceUnnamed)
		}
	})
	t.Run("stats", func(t *testing.T) {
		s := runStats(t, dir)
		n := 0
		for _, row := range s.Tables["tensors"] {
			i := slices.Index(names, row["tensor"].(string))
			if i < 0 {
				continue
			}
			n++
			if why := wantNA[want[i]]; why != "" {
				if row["device"] != nil || row["device_na_reason"] != why {
					t.Errorf("%s: device %v (%v), want NA: %s", row["tensor"], row["device"], row["device_na_reason"], why)
				}
			} else if row["device"] != want[i] {
				t.Errorf("%s: device %v, want %s", row["tensor"], row["device"], want[i])
			}
		}
		if n != len(names) {
			t.Errorf("%d of the %d weights in the tensors table", n, len(names))
		}
	})
	t.Run("report", func(t *testing.T) {
		run := storetest.OpenRun(t, dir)
		tab, note, err := report.DeviceTable(run)
		if err != nil || tab == nil {
			t.Fatalf("devices table %v, %q, %v", tab, note, err)
		}
		// device, weights, copied, streamed
		got := map[string][]stats.Value{}
		for _, r := range tab.Rows {
			got[r[0].S] = r[:4]
		}
		for _, tc := range []struct {
			dev              string
			copied, streamed stats.Value
		}{
			{"Vulkan0", stats.I64(1), stats.I64(0)},
			{"CPU_Mapped", stats.I64(0), stats.I64(1)},
			// No buffer probe is known to have run: not even the copies.
			{event.DeviceUnknown, stats.NA(wantNA[event.DeviceUnknown]), stats.NA(wantNA[event.DeviceUnknown])},
			// The loader's copy was seen, the buffer's name was not.
			{event.DeviceUnnamed, stats.I64(1), stats.NA(wantNA[event.DeviceUnnamed])},
		} {
			r := got[tc.dev]
			if r == nil || r[2] != tc.copied || r[3] != tc.streamed {
				t.Errorf("%s: %v, want copied %v, streamed %v", tc.dev, r, tc.copied, tc.streamed)
			}
		}
	})
}
