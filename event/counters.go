package event

// Counters are what a token, a tensor or an expert is charged.
type Counters struct {
	Faults       uint64 // completed faults: Major + Minor
	Major        uint64
	Minor        uint64
	Unaccounted  uint64 // faults that began but were never completed; not in Faults
	StallNS      uint64 // summed stall of the completed faults
	PagesAdded   uint64 // page-cache pages added whose first byte is here
	AddedBytes   uint64 // page-cache bytes added (landed here)
	TriggerBytes uint64 // page-cache bytes added during this tensor's faults
	PagesEvicted uint64 // page-cache pages removed whose first byte is here
	EvictedBytes uint64
	ReadBytes    uint64 // bytes read from the device
	BlockReqs    uint64 // block read requests whose first byte is here
	// RequestedBytes are bytes read(2)/pread(2)/io_uring read of it: what
	// a load without mmap (llama.cpp --load-mode none, dio) asks for.
	RequestedBytes uint64
	// WaitNS is the part of StallNS the faulting threads slept off the
	// CPU (on the device, a lock, reclaim's throttle): what a prefetch can
	// take off the token. The rest is the kernel's work on the CPU, or
	// PreemptedNS.
	WaitNS uint64
	// PreemptedNS is the part of StallNS the faulting threads spent
	// preempted, runnable off the CPU: the machine's other work, not
	// the fault's.
	PreemptedNS uint64
}

// Add adds o to c.
func (c *Counters) Add(o *Counters) {
	c.Faults += o.Faults
	c.Major += o.Major
	c.Minor += o.Minor
	c.Unaccounted += o.Unaccounted
	c.StallNS += o.StallNS
	c.PagesAdded += o.PagesAdded
	c.AddedBytes += o.AddedBytes
	c.TriggerBytes += o.TriggerBytes
	c.PagesEvicted += o.PagesEvicted
	c.EvictedBytes += o.EvictedBytes
	c.ReadBytes += o.ReadBytes
	c.BlockReqs += o.BlockReqs
	c.RequestedBytes += o.RequestedBytes
	c.WaitNS += o.WaitNS
	c.PreemptedNS += o.PreemptedNS
}

// Unit is what a counter counts, for rendering.
type Unit string

const (
	UnitCount Unit = "count"
	UnitPages Unit = "pages"
	UnitBytes Unit = "bytes"
	UnitNS    Unit = "ns"
)

// Counter describes one field of Counters. CounterFields is the one list of
// them: the store encodes counters in its order, and query columns, query
// --sort names and export columns are its names (upper-cased in tables).
type Counter struct {
	Name    string
	Unit    Unit
	Meaning string
	// Table is set for the counters a query's table shows by default;
	// CSV and JSON carry every counter.
	Table bool
	Field func(*Counters) *uint64
}

// NumCounters is the number of fields of Counters.
const NumCounters = 15

// CounterFields lists every counter once. Appending one means a new field
// of Counters, a line in Add, and a new store format.
var CounterFields = [NumCounters]Counter{
	{"faults", UnitCount, "completed page faults (major + minor)", true, func(c *Counters) *uint64 { return &c.Faults }},
	{"major_faults", UnitCount, "completed faults that waited for I/O", true, func(c *Counters) *uint64 { return &c.Major }},
	{"minor_faults", UnitCount, "completed faults served from the page cache", true, func(c *Counters) *uint64 { return &c.Minor }},
	{"unaccounted_faults", UnitCount, "faults that began but were never completed (not in faults)", false, func(c *Counters) *uint64 { return &c.Unaccounted }},
	{"fault_stall_ns", UnitNS, "summed stall of the completed faults", true, func(c *Counters) *uint64 { return &c.StallNS }},
	{"pages_added", UnitPages, "page-cache pages added whose first byte is here", true, func(c *Counters) *uint64 { return &c.PagesAdded }},
	{"bytes_added", UnitBytes, "page-cache bytes added here", false, func(c *Counters) *uint64 { return &c.AddedBytes }},
	{"readahead_trigger_bytes", UnitBytes, "page-cache bytes added during this tensor's faults (read ahead on its behalf)", true, func(c *Counters) *uint64 { return &c.TriggerBytes }},
	{"pages_evicted", UnitPages, "page-cache pages removed whose first byte is here", true, func(c *Counters) *uint64 { return &c.PagesEvicted }},
	{"bytes_evicted", UnitBytes, "page-cache bytes removed here", false, func(c *Counters) *uint64 { return &c.EvictedBytes }},
	{"bytes_read", UnitBytes, "bytes read from the device", true, func(c *Counters) *uint64 { return &c.ReadBytes }},
	{"block_requests", UnitCount, "block read requests whose first byte is here", true, func(c *Counters) *uint64 { return &c.BlockReqs }},
	{"bytes_requested", UnitBytes, "bytes read from the model file by read syscalls and io_uring (loads without mmap)", true, func(c *Counters) *uint64 { return &c.RequestedBytes }},
	{"fault_wait_ns", UnitNS, "the part of fault_stall_ns the faulting threads slept off the CPU (the rest is fault_preempted_ns and the kernel's work on a CPU)", false, func(c *Counters) *uint64 { return &c.WaitNS }},
	{"fault_preempted_ns", UnitNS, "the part of fault_stall_ns the faulting threads spent preempted, runnable off the CPU", false, func(c *Counters) *uint64 { return &c.PreemptedNS }},
}

// CounterByName finds a counter by its name.
func CounterByName(name string) (*Counter, bool) {
	for i := range CounterFields {
		if CounterFields[i].Name == name {
			return &CounterFields[i], true
		}
	}
	return nil, false
}

// Values lists the counters in CounterFields order.
func (c *Counters) Values() [NumCounters]uint64 {
	var v [NumCounters]uint64
	for i := range CounterFields {
		v[i] = *CounterFields[i].Field(c)
	}
	return v
}

// SetValues is the inverse of Values.
func (c *Counters) SetValues(v *[NumCounters]uint64) {
	for i := range CounterFields {
		*CounterFields[i].Field(c) = v[i]
	}
}
