package ingest

import (
	"sync/atomic"

	"github.com/iocorr/iocorr/wire"
)

// Counts holds records written to the spool per event type.
type Counts [wire.EventTypeCount]uint64

// Map names the counts for the run metadata; every type is present.
func (c *Counts) Map() map[string]uint64 {
	m := make(map[string]uint64, len(c))
	for t := uint32(1); t < wire.EventTypeCount; t++ {
		m[wire.EventTypeName(t)] = c.Get(t)
	}
	return m
}

// Get reads one count; safe while bpf.Drain runs.
func (c *Counts) Get(typ uint32) uint64 { return atomic.LoadUint64(&c[typ]) }

// Total is the number of records of every type.
func (c *Counts) Total() uint64 {
	var n uint64
	for t := range c {
		n += c.Get(uint32(t))
	}
	return n
}
