package output

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/iocorr/iocorr/store"
)

// CounterNA maps the counters a run did not measure (its probe tier left
// their probes off, rundir.Meta.CountersNA) to why.
type CounterNA map[string]string

// Unmeasured is what a run did not measure, and whether a table keeps
// those columns. By default a table leaves them out: a column NA in every
// row tells a reader nothing its absence does not, and an analyst summing
// it would sum nulls. With All they stay, nullable and NA in every row.
// Either way the reasons travel beside the data (Sidecar, Notes), never
// in its rows.
type Unmeasured struct {
	Counters CounterNA
	// Selected is why the router's picks were not recorded
	// (rundir.Meta.PicksNA): the selected column of a query by expert.
	Selected string
	All      bool
}

// reason is why col was not measured ("" when it was).
func (u *Unmeasured) reason(col string) string {
	if u == nil {
		return ""
	}
	if col == store.Selected {
		return u.Selected
	}
	return u.Counters[col]
}

// keeps says whether a table has column col, and whether it is NA.
func (u *Unmeasured) keeps(col string) (keep, na bool) {
	why := u.reason(col)
	return why == "" || u.All, why != ""
}

// Columns is every unmeasured column, in name order.
func (u *Unmeasured) Columns() []string {
	cols := slices.Collect(maps.Keys(u.Counters))
	if u.Selected != "" {
		cols = append(cols, store.Selected)
	}
	slices.Sort(cols)
	return cols
}

// Notes are the lines that say, once per command, which columns are NA
// and why, one line per reason: those a table leaves out, and with All
// those it keeps as NA.
func (u *Unmeasured) Notes() []string {
	byReason := map[string][]string{}
	for _, col := range u.Columns() {
		why := u.reason(col)
		byReason[why] = append(byReason[why], col)
	}
	var notes []string
	for _, why := range slices.Sorted(maps.Keys(byReason)) {
		cols := strings.Join(byReason[why], ", ")
		if u.All {
			notes = append(notes, fmt.Sprintf("%s NA: %s", cols, why))
		} else {
			notes = append(notes, fmt.Sprintf("%s left out (--all-columns keeps them, NA): %s", cols, why))
		}
	}
	return notes
}

// NoteNA tells w why each unmeasured column it has is NA (Parquet keeps
// the reasons in the file's metadata), in a fixed order.
func NoteNA(w Writer, u *Unmeasured) {
	if u == nil || !u.All {
		return
	}
	for _, col := range u.Columns() {
		w.SetNA(col, u.reason(col))
	}
}

// Sidecar is NAME.na.json, written beside an export written to a file:
// the run's status and why each unmeasured column is NA or left out,
// which CSV, with no place for them outside its rows, cannot carry.
type Sidecar struct {
	// Run is the run directory the export read.
	Run string `json:"run"`
	// Status is rundir.Meta.Status: "" for a run recorded to its end.
	Status string `json:"run_status"`
	// NA maps each column NA in every row to why.
	NA map[string]string `json:"na"`
	// LeftOut are the columns of NA that the export left out.
	LeftOut []string `json:"left_out"`
	// SomeRowsNA maps each column NA in some rows only to why: its one
	// reason, or, where reasons differ by row, the column that gives
	// each row's (COL_na_reason, null where COL is measured).
	SomeRowsNA map[string]string `json:"na_in_some_rows,omitempty"`
	// RowsNA says which rows the export cannot have one by one, and why
	// (an events export of a run that counted the faults outside the
	// model files in the kernel: rundir.Meta.FaultDetailNA).
	RowsNA string `json:"rows_na,omitempty"`
	// ValuesNA maps a column to its values that stand for no
	// measurement, each to why: the device column's event.DeviceUnknown
	// and event.DeviceUnnamed (store.Store.DevicesNA).
	ValuesNA map[string]map[string]string `json:"values_na,omitempty"`
}

// NewSidecar is the sidecar of an export of the run in run with status.
func NewSidecar(run, status string, u *Unmeasured) *Sidecar {
	s := &Sidecar{Run: run, Status: status, NA: map[string]string{}, LeftOut: []string{}}
	if u == nil {
		return s
	}
	for _, col := range u.Columns() {
		s.NA[col] = u.reason(col)
		if !u.All {
			s.LeftOut = append(s.LeftOut, col)
		}
	}
	return s
}

// Write writes the sidecar as indented JSON.
func (s *Sidecar) Write(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

// SidecarPath is where the sidecar of an export written to path goes:
// its name without the extension, then .na.json.
func SidecarPath(path string) string {
	base := path
	if i := strings.LastIndexByte(path, '.'); i > strings.LastIndexByte(path, '/')+1 {
		base = path[:i]
	}
	return base + ".na.json"
}

// naNote is one column's reason for NA, as SetNA was told it.
type naNote struct{ col, reason string }

// naKey is the name a column's NA reason goes by in Parquet metadata.
func naKey(col string) string { return col + "_na_reason" }
