package rundir

// What a span of a run (a token, a phase) waited on, from its I/O shape:
// the one rule stats' io_shape verdict and plan's prefetch advice both
// apply, taken in this order:
//
//  1. wait share < 0.25: compute. The wait is the part of the fault stall
//     the threads slept off the CPU (on the device, a lock); removing it
//     all would give at most 1/(1−0.25) = 1.33× the tokens/s. The rest of
//     the stall is the kernel's work in the faults, on the CPU (or time
//     preempted there, waiting for one): compute too. A run that did not time the waits is judged by
//     its stall share, their upper bound. The bench's cases on the lab's
//     VM: a stall share of 0.46 with a wait share of 0.06 (read-ahead 128
//     KiB), where a prefetch gave 0.86×; 0.69 and 0.22 (qwen3moe at 160
//     MiB), 1.02×; 0.75 and 0.35 (the demo MoE at 96 MiB), 1.31×.
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

	ComputeWaitShare   = 0.25
	BandwidthBusyShare = 0.8
	BandwidthBWShare   = 0.7
)

// IOBound applies the rule to a span's wait share (or stall share, where
// the waits were not timed), busy share and bandwidth share; busyKnown and
// bwKnown say whether the last two were measured. It returns "" where a
// step that decides needs a figure that was not.
func IOBound(waitShare, busyShare float64, busyKnown bool, bwShare float64, bwKnown bool) string {
	switch {
	case waitShare < ComputeWaitShare:
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
