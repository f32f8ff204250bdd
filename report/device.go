package report

import (
	"fmt"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/stats"
	"github.com/iocorr/iocorr/store"
)

// DeviceCounters are the counters the per-device table shows, in its
// column order after the weights' placement.
var DeviceCounters = []string{"bytes_read", "faults", "major_faults", "fault_stall_ns", "bytes_requested"}

// DeviceTable is where the run's weights lived (llama.cpp's buffer names,
// event.DeviceUnknown where no probe placed a weight, event.DeviceUnnamed
// where its buffer's name could not be read) and what each device's
// weights cost: a row per device of `iocorr query --by device`, with how
// many weights the loader copied into that buffer at load and how many
// were streamed from the model's mapping. It is nil, with a note saying
// why, when the run has one device and copied nothing: the per-tensor
// tables already say it all.
func DeviceTable(recorded *store.Run) (*stats.Table, string, error) {
	st, meta := recorded.Store, recorded.Meta
	type placed struct{ weights, copied int }
	devs := map[string]*placed{}
	var order []string
	anyCopied := false
	for i := range st.Tensors {
		t := &st.Tensors[i]
		if t.Pseudo() {
			continue
		}
		d := t.DeviceName()
		p := devs[d]
		if p == nil {
			p = &placed{}
			devs[d] = p
			order = append(order, d)
		}
		p.weights++
		if t.Copied {
			p.copied++
			anyCopied = true
		}
	}
	if len(devs) <= 1 && !anyCopied {
		where := "no weight"
		if len(order) == 1 {
			where = "every weight on " + order[0]
		}
		return nil, fmt.Sprintf("no per-device table: the run has one device (%s) and no weight copied into a backend buffer at load", where), nil
	}
	rows, err := st.Query(store.Query{By: "device"})
	if err != nil {
		return nil, "", fmt.Errorf("querying by device: %w", err)
	}
	byKey := map[string]*store.Row{}
	for i := range rows {
		byKey[rows[i].Key] = &rows[i]
	}
	// Devices in query's order (named ones, then the unplaced), then any
	// the query charged nothing, in tensor order.
	keys := make([]string, 0, len(order))
	for _, r := range rows {
		if devs[r.Key] != nil {
			keys = append(keys, r.Key)
		}
	}
	for _, d := range order {
		if byKey[d] == nil {
			keys = append(keys, d)
		}
	}
	t := &stats.Table{Name: "devices", Title: "where the weights lived (llama.cpp's buffer names) and the I/O charged to each device's weights: copied into the buffer at load (their reads are the load's) or streamed from the model's mapping",
		Columns: []stats.Column{{Name: "device", Kind: stats.String}, {Name: "weights", Kind: stats.Int},
			{Name: "copied_at_load_weights", Kind: stats.Int}, {Name: "streamed_from_mapping_weights", Kind: stats.Int}}}
	for _, c := range DeviceCounters {
		t.Columns = append(t.Columns, stats.Column{Name: c, Kind: stats.Int})
	}
	for _, d := range keys {
		p := devs[d]
		row := []stats.Value{stats.Str(d), stats.I64(p.weights), stats.I64(p.copied), stats.I64(p.weights - p.copied)}
		// Of weights in no named buffer, those the loader copied are
		// known (its probe saw each copy); whether the rest were streamed
		// from the mapping is not, nor, where no buffer probe ran at all,
		// whether none was copied.
		if why := event.DeviceNA(d); why != "" {
			row[3] = stats.NA(why)
			if d == event.DeviceUnknown && p.copied == 0 {
				row[2] = stats.NA(why)
			}
		}
		for _, c := range DeviceCounters {
			if why := meta.CounterNA(c); why != "" {
				row = append(row, stats.NA(why))
				continue
			}
			var v uint64
			if r := byKey[d]; r != nil {
				cf, _ := event.CounterByName(c)
				v = *cf.Field(&r.Counters)
			}
			row = append(row, stats.I64(v))
		}
		t.Rows = append(t.Rows, row)
	}
	return t, "", nil
}
