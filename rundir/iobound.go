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
//  2. the disk profile (iocorr doctor --disk) serves at least twice as
//     much at a greater depth, for reads of the span's size, as at the
//     span's mean depth: latency. The reads come too few at a time for the
//     device, however busy it is with them: an SSD or a network volume
//     serves many reads at once, and one in flight keeps it "busy". Two
//     times, not the 1/0.7 the next steps imply, because a profile's
//     points move by a fifth between runs on the lab's VM disk (1.2–1.4
//     times from depth 1 to its best), whose decodes a prefetch's reads
//     do not get through faster (the bench's prefetched runs stall as
//     long a MiB as the plain runs); a disk whose every read takes 2 ms,
//     however many are in flight (the bench's far disk) serves 10 times
//     what it does at the 1.9 reads its decode keeps in flight.
//  3. busy share ≥ 0.8: bandwidth. The device is almost never idle while
//     the span runs, and more requests at once would only queue.
//  4. bandwidth share ≥ 0.7: bandwidth. The reads already get most of what
//     the device serves at the depth they have.
//  5. Otherwise latency: the span waits on faults while the device idles
//     or serves less than it can; more requests in flight (prefetch) pay.
const (
	BoundCompute   = "compute"
	BoundLatency   = "latency"
	BoundBandwidth = "bandwidth"

	ComputeWaitShare   = 0.25
	BandwidthBusyShare = 0.8
	BandwidthBWShare   = 0.7
	LatencyDepthGain   = 2.0
)

// IOBound applies the rule to a span's wait share (or stall share, where
// the waits were not timed), busy share, bandwidth share and the disk's
// depth gain at the span's depth and read size (DiskProfile.DepthGain);
// busyKnown, bwKnown and gainKnown say whether the last three were
// measured. It returns "" where a step that decides needs a figure that
// was not. Without a profile the gain is unknown and the step is skipped:
// a busy device is then taken as saturated.
func IOBound(waitShare, busyShare float64, busyKnown bool, bwShare float64, bwKnown bool, depthGain float64, gainKnown bool) string {
	switch {
	case waitShare < ComputeWaitShare:
		return BoundCompute
	case !busyKnown:
		return ""
	case gainKnown && depthGain >= LatencyDepthGain:
		return BoundLatency
	case busyShare >= BandwidthBusyShare:
		return BoundBandwidth
	case !bwKnown:
		return ""
	case bwShare >= BandwidthBWShare:
		return BoundBandwidth
	}
	return BoundLatency
}
