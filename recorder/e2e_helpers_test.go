package recorder_test

import (
	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/store"
)

// The end-to-end tests of this package record as `iocorr record` does,
// through testkit/rectest (Run with the CLI's defaults, then the one
// ingest), and read the run's store through store, as `query` and
// `export` do.

// counterSums are counters by name, summed.
type counterSums map[string]uint64

func (s counterSums) add(c *event.Counters) {
	for _, d := range event.CounterFields {
		s[d.Name] += *d.Field(c)
	}
}

// rowSums are a query's rows' counters by the rows' keys.
func rowSums(rows []store.Row) map[string]counterSums {
	out := map[string]counterSums{}
	for i := range rows {
		if out[rows[i].Key] == nil {
			out[rows[i].Key] = counterSums{}
		}
		out[rows[i].Key].add(&rows[i].Counters)
	}
	return out
}
