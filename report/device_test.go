package report_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/report"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/stats"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/testkit/storetest"
)

func devAgg(token, tensor uint32, faults, major, stall, read uint64) event.Agg {
	return event.Agg{AggKey: event.AggKey{Token: token, Tensor: tensor, Expert: -1},
		Counters: event.Counters{Faults: faults, Major: major, Minor: faults - major, StallNS: stall, ReadBytes: read}}
}

// hybridStore is a hybrid run's store as the recorder leaves it: layer 0's
// attention copied into Vulkan0 at load (its reads are token 0's), the
// experts streamed from CPU_Mapped, layer 1's attention placed by no
// probe, and a tensor nothing read.
func hybridStore(t *testing.T, devices ...string) *store.Store {
	tensors := slices.Clone(storetest.Pseudos)
	for i, d := range devices {
		tensors = append(tensors, event.Tensor{ID: uint32(3 + i), Name: "blk." + string(rune('0'+i)) + ".w", Layer: i, Device: d, Copied: d == "Vulkan0"})
	}
	var aggs []event.Agg
	for i := range devices {
		if i < 3 {
			aggs = append(aggs, devAgg(uint32(i), uint32(3+i), uint64(10*(i+1)), uint64(i+1), uint64(1000*(i+1)), uint64(4096*(i+1))))
		}
	}
	return storetest.FromResult(t, event.Result{Tensors: tensors, Ops: []string{""}, Aggs: aggs,
		Tokens: []event.TokenInfo{{Token: 1, Phase: event.PhasePrefill}, {Token: 2, Phase: event.PhaseDecode}}})
}

func TestDeviceTableIsQueryByDeviceWithEachDevicesCopiedAndStreamedWeights(t *testing.T) {
	st := hybridStore(t, "Vulkan0", "CPU_Mapped", "", "CPU_Mapped", "Vulkan0")
	// No read-syscall probe: bytes_requested is NA with the reason.
	meta := &rundir.Meta{Finished: true, Complete: true}
	tab, note, err := report.DeviceTable(&store.Run{Store: st, Meta: meta})
	if err != nil || tab == nil {
		t.Fatalf("table %v, note %q, err %v", tab, note, err)
	}
	rows, err := st.Query(store.Query{By: "device"})
	if err != nil {
		t.Fatal(err)
	}
	// Weights per device, as the store was built.
	placed := map[string][3]int64{"Vulkan0": {2, 2, 0}, "CPU_Mapped": {2, 0, 2}, event.DeviceUnknown: {1, -1, -1}}
	var got []string
	for _, r := range tab.Rows {
		got = append(got, r[0].S)
	}
	var want []string
	for _, r := range rows {
		want = append(want, r.Key)
	}
	if !slices.Equal(got, want) || len(got) != 3 {
		t.Fatalf("devices %q, want query --by device's %q", got, want)
	}
	col := func(name string) int {
		return slices.IndexFunc(tab.Columns, func(c stats.Column) bool { return c.Name == name })
	}
	for _, r := range tab.Rows {
		p := placed[r[0].S]
		for i, c := range []string{"weights", "copied_at_load_weights", "streamed_from_mapping_weights"} {
			v := r[col(c)]
			switch {
			case p[i] < 0 && (v.NA == "" || !strings.Contains(v.NA, "no probe saw")):
				t.Errorf("%s %s: %+v, want NA saying no probe placed it", r[0].S, c, v)
			case p[i] >= 0 && (v.NA != "" || v.I != p[i]):
				t.Errorf("%s %s: %+v, want %d", r[0].S, c, v, p[i])
			}
		}
		qr := rows[slices.IndexFunc(rows, func(q store.Row) bool { return q.Key == r[0].S })]
		for _, c := range report.DeviceCounters {
			v := r[col(c)]
			if c == "bytes_requested" {
				if !strings.Contains(v.NA, "did not trace read syscalls") {
					t.Errorf("%s bytes_requested: %+v, want NA with the reason", r[0].S, v)
				}
				continue
			}
			cf, _ := event.CounterByName(c)
			if want := int64(*cf.Field(&qr.Counters)); v.NA != "" || v.I != want {
				t.Errorf("%s %s: %+v, query --by device says %d", r[0].S, c, v, want)
			}
		}
	}
}

func TestDeviceTableIsLeftOutOfARunOnOneDeviceSayingWhy(t *testing.T) {
	tab, note, err := report.DeviceTable(&store.Run{Store: hybridStore(t, "CPU_Mapped", "CPU_Mapped"), Meta: &rundir.Meta{}})
	if err != nil || tab != nil || !strings.Contains(note, "every weight on CPU_Mapped") {
		t.Fatalf("table %v, note %q, err %v: want no table and a note naming the one device", tab, note, err)
	}
}

func TestReportOfAHybridRunShowsTheDeviceTable(t *testing.T) {
	st := hybridStore(t, "Vulkan0", "CPU_Mapped")
	meta := &rundir.Meta{Finished: true, Complete: true, Models: []rundir.ModelFile{{Path: "hybrid.gguf", Size: 1 << 20, Pages: 256}}}
	sr, err := stats.Compute(&store.Run{Store: st, Meta: meta}, stats.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := report.Build(&store.Run{Store: st, Meta: meta}, sr, report.Options{})
	if err != nil {
		t.Fatal(err)
	}
	page := string(html(t, rep))
	for _, want := range []string{"copied_at_load_weights", "Vulkan0", "CPU_Mapped", "did not trace read syscalls"} {
		if !strings.Contains(page, want) {
			t.Errorf("the report does not show %q", want)
		}
	}
}
