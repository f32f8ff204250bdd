package output

import (
	"maps"
	"slices"
)

// CounterNA maps the counters a run did not measure (its probe tier left
// their probes off, rundir.Meta.CountersNA) to why. Their columns are
// nullable and their cells NA, never a zero.
type CounterNA map[string]string

// NoteNA tells w why each unmeasured column is NA, in a fixed order.
func NoteNA(w Writer, na CounterNA) {
	for _, col := range slices.Sorted(maps.Keys(na)) {
		w.SetNA(col, na[col])
	}
}

// naNote is one column's reason for NA, as SetNA was told it.
type naNote struct{ col, reason string }

// naKey is the name a column's NA reason goes by in JSON rows and Parquet
// metadata.
func naKey(col string) string { return col + "_na_reason" }
