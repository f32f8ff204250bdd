package correlate

import (
	"fmt"

	"github.com/iocorr/iocorr/ingest"
)

// Attribute decodes and attributes records held in memory, in order, as a
// ring buffer gives them, and finishes: AddSpool and Finish for records
// that never went to a spool. Such records come whole from the ring (a
// spool may end torn), so one that does not decode is an error.
func (c *Correlator) Attribute(recs [][]byte) (*Result, error) {
	ds := &c.stats.Decode
	for i, rec := range recs {
		r, ok := ingest.Decode(rec, ds)
		if !ok {
			return nil, fmt.Errorf("record %d of %d does not decode: %+v", i, len(recs), *ds)
		}
		if err := c.Add(r); err != nil {
			return nil, err
		}
	}
	return c.Finish()
}
