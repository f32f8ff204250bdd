package rundir

// What a span of a run (a token, a phase) waited on, from its I/O shape:
// the one rule stats' io_shape verdict and plan's prefetch advice both
// apply, taken in this order:
//
//  1. stall share < 0.25: compute. Removing every stall would give at
//     most 1/(1−0.25) = 1.33× the tokens/s: the I/O is not the cost.
//  2. busy share ≥ 0.8: bandwidth. The device is almost never idle while
//     the span runs: more requests at once only queue.
//  3. bandwidth share ≥ 0.7: bandwidth. The reads already get most of what
//     the device serves at the depth they have (its profile, iocorr
//     doctor --disk).
//  4. Otherwise latency: the span waits on faults while the device idles
//     or serves less than it can; more requests in flight (prefetch) pay.
const (
	BoundCompute   = "compute"
	BoundLatency   = "latency"
	BoundBandwidth = "bandwidth"

	ComputeStallShare  = 0.25
	BandwidthBusyShare = 0.8
	BandwidthBWShare   = 0.7
)

// IOBound applies the rule to a span's stall share, busy share and
// bandwidth share; busyKnown and bwKnown say whether the last two were
// measured. It returns "" where a step that decides needs a figure that
// was not.
func IOBound(stallShare, busyShare float64, busyKnown bool, bwShare float64, bwKnown bool) string {
	switch {
	case stallShare < ComputeStallShare:
		return BoundCompute
	case !busyKnown:
		return ""
	case busyShare >= BandwidthBusyShare:
		return BoundBandwidth
	case !bwKnown:
		return ""
	case bwShare >= BandwidthBWShare:
		return BoundBandwidth
	}
	return BoundLatency
}
