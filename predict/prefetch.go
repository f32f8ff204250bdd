package predict

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/internal/units"
	"github.com/iocorr/iocorr/pin"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/stats"
	"github.com/iocorr/iocorr/store"
)

// Prefetch policies: a prefetcher's requests ahead of the graph, the rest
// to the kernel's policy.
const (
	// PolicyPrefetchExperts requests the picked experts' slices of a layer
	// (gate, up, down; gate_up where fused) at the router's pick.
	PolicyPrefetchExperts = "prefetch-experts"
	// PolicyPrefetchLayers requests the next layer's dense weights (the
	// output head after the last layer) at a layer's start.
	PolicyPrefetchLayers = "prefetch-layers"
	// PolicyPrefetchBoth does both, as iocorr prefetch --layers: the next
	// layer's at the pick, after the picked slices.
	PolicyPrefetchBoth = "prefetch-both"
)

// PrefetchPolicy is the policy of a --prefetch choice (experts, layers,
// both), "" for none of them.
func PrefetchPolicy(choice string) string {
	switch choice {
	case "experts":
		return PolicyPrefetchExperts
	case "layers":
		return PolicyPrefetchLayers
	case "both":
		return PolicyPrefetchBoth
	}
	return ""
}

func prefetchesExperts(pol string) bool {
	return pol == PolicyPrefetchExperts || pol == PolicyPrefetchBoth
}

func prefetchesLayers(pol string) bool {
	return pol == PolicyPrefetchLayers || pol == PolicyPrefetchBoth
}

// deviceRate is the model disk: as the run's own block requests measured
// it (the bytes it read over the time it was busy: the rate it serves at
// the depth the run kept it), and as `iocorr doctor --disk` measured it
// at every depth where the run carries the disk's profile.
type deviceRate struct {
	bytesPerS float64
	busy      []span // disjoint, in order
	// requestBytes is the run's mean read request: the block size a
	// prefetch's reads are split into.
	requestBytes float64
	profile      *rundir.DiskProfile // nil without one
	why          string              // why the run's rate is not known ("" when it is)
}

// device sets the run's device from its read requests' intervals
// (disjoint, in order), bytes and count, and the disk's profile.
func (r *Run) device(busy []span, bytes uint64, requests int, profile *rundir.DiskProfile) {
	r.dev = deviceRate{busy: busy}
	if profile != nil && len(profile.Points) > 0 {
		r.dev.profile = profile
	}
	if requests > 0 {
		r.dev.requestBytes = float64(bytes) / float64(requests)
	}
	t := covered(busy, 0, ^uint64(0))
	if t == 0 || bytes == 0 {
		r.dev.why = "the run has no completed read request: the device's rate was not measured"
		return
	}
	r.dev.bytesPerS = float64(bytes) / (float64(t) / 1e9)
}

// maxDepth is the deepest queue a prefetch's request is taken to keep:
// doctor --disk's deepest.
const maxDepth = 32

// rate is the bytes per second the device serves a request of asked
// bytes at, and where the figure came from: with the disk's profile, at
// the depth its reads keep (asked over the run's mean request, at most
// maxDepth) and that request size; without one, the run's own rate.
// ok is false where neither is known.
func (d *deviceRate) rate(asked int64) (bytesPerS float64, note string, ok bool) {
	if d.profile != nil && d.requestBytes > 0 {
		depth := min(max(math.Ceil(float64(asked)/d.requestBytes), 1), maxDepth)
		if bw, ok := d.profile.BandwidthAt(depth, d.requestBytes); ok && bw > 0 {
			return bw, ProfileNote, true
		}
	}
	if d.why != "" || d.bytesPerS <= 0 {
		return 0, "", false
	}
	return d.bytesPerS, DeviceNote, true
}

// Notes of a prefetch row: where the device's rate its requests are
// timed at came from. Both begin with DeviceNotePrefix.
const (
	DeviceNotePrefix = "device rate from "
	DeviceNote       = DeviceNotePrefix + "the run's own block completions (bytes over the time the disk was busy, at the run's own depth; a deeper queue may serve faster): the run carries no disk profile"
	ProfileNote      = DeviceNotePrefix + "the disk's profile (iocorr doctor --disk), at the depth each request's reads keep (its bytes over the run's mean read request, at most 32) and that request size"
)

// BandwidthBoundNote is the note of a prefetch row of a bandwidth-bound
// phase, whose stall is held to its bytes at the run's stall per byte
// (the bench's prefetch section, docs/measuring.md).
const BandwidthBoundNote = "the run's calls of this phase are bandwidth-bound: the device serves a prefetch's reads no faster than the faults', so the stall is at least the bytes read at the run's stall per byte (a prefetch pays there by the bytes it does not read)"

// BestRateNote is the note of a prefetch row of a phase that was not
// bandwidth-bound, whose stall is held to its bytes at the disk
// profile's best rate.
const BestRateNote = "the device serves a prefetch's reads no faster than the disk profile's best (%.0f MB/s, at its best depth for this phase's read size), so the stall is at least the bytes read at that rate"

// bound is what the phase's calls waited on: stats' io_shape verdict of
// the phase (boundsOf), "" with why where a deciding figure was not
// measured.
func (r *Run) bound(ph uint8) (bound string, busyShare float64, why string) {
	r.loadBounds()
	b, ok := r.bounds[ph]
	switch {
	case r.boundsWhy != "":
		return "", 0, r.boundsWhy
	case !ok:
		return "", 0, "the run's " + event.PhaseName(ph) + " has no I/O shape"
	}
	return b.bound, b.busyShare, b.why
}

// loadBounds reads the run's phase verdicts once (boundsOf).
func (r *Run) loadBounds() {
	if r.bounds == nil && r.recorded != nil {
		var err error
		if r.bounds, err = boundsOf(r.recorded); err != nil {
			r.boundsWhy = err.Error()
		}
	}
}

// phaseBound is a phase's verdict in stats' I/O shape: what its calls
// waited on (rundir.IOBound, "" where a deciding figure is NA: why says
// which), and the device's busy share.
type phaseBound struct {
	bound     string
	busyShare float64
	why       string
	// bestBytesPerS is what the disk profile serves at its best depth
	// for reads of the phase's size (stats' device_bandwidth_mb_per_s at
	// the phase's depth times its depth_gain); 0 where NA (no profile).
	bestBytesPerS float64
}

// boundsOf reads each phase's verdict from stats' I/O shape of the run:
// plan judges a prefetch by the verdict stats, the report and the
// dataset give, not by a second account of the same requests.
func boundsOf(recorded *store.Run) (map[uint8]phaseBound, error) {
	t, _, err := stats.IOShape(recorded)
	if err != nil {
		return nil, fmt.Errorf("the run's I/O shape: %w", err)
	}
	phase, busy, verdict := t.Col("phase"), t.Col("busy_share"), t.Col("verdict")
	device, gain := t.Col("device_bandwidth_mb_per_s"), t.Col("depth_gain")
	if phase < 0 || busy < 0 || verdict < 0 || device < 0 || gain < 0 {
		return nil, fmt.Errorf("the run's I/O shape has no phase, busy_share, verdict, device_bandwidth_mb_per_s or depth_gain column")
	}
	out := map[uint8]phaseBound{}
	err = t.Each(func(row []stats.Value) error {
		for _, ph := range []uint8{event.PhasePrefill, event.PhaseDecode} {
			if row[phase].S == event.PhaseName(ph) {
				pb := phaseBound{bound: row[verdict].S, busyShare: row[busy].F, why: row[verdict].NA}
				if row[device].NA == "" && row[gain].NA == "" && row[gain].F >= 1 {
					pb.bestBytesPerS = row[device].F * 1e6 * row[gain].F
				}
				out[ph] = pb
			}
		}
		return nil
	})
	return out, err
}

// group is one request a prefetcher makes in a call: the reads it
// covers (indices into the call's reads), made before read at, and the
// read whose weight's first fault stands for the moment it is made.
type group struct {
	at    int
	reads []int
	// anchor are the reads whose earliest first fault is the request's
	// moment in the trace: the router's pick has no time of its own, and
	// the layer's first expert fault follows it within the router's
	// top-k; a layer's start is its first fault.
	anchor  []int
	experts bool
}

// groups lists the requests a policy makes in call c, in stream order.
func groups(c *call, pol string) []group {
	var out []group
	layerStart := map[int16]int{}
	var layers []int16
	for i, o := range c.of {
		if o.layer < 0 {
			continue
		}
		if _, ok := layerStart[o.layer]; !ok {
			layerStart[o.layer] = i
			layers = append(layers, o.layer)
		}
	}
	readsOf := func(pred func(readOf) bool) []int {
		var rs []int
		for i, o := range c.of {
			if pred(o) {
				rs = append(rs, i)
			}
		}
		return rs
	}
	for k, l := range layers {
		inLayer := readsOf(func(o readOf) bool { return o.layer == l })
		var ex []int
		if prefetchesExperts(pol) {
			ex = readsOf(func(o readOf) bool { return o.layer == l && o.expert >= 0 })
			if len(ex) > 0 {
				out = append(out, group{at: ex[0], reads: ex, anchor: ex, experts: true})
			}
		}
		if prefetchesLayers(pol) {
			// After the last layer: the output head, what the call read of
			// no layer after that layer began (not the token embedding's
			// rows it read first), as iocorr prefetch asks for it.
			var next []int
			for _, i := range readsOf(func(o readOf) bool { return o.layer < 0 && o.expert < 0 }) {
				if i > layerStart[l] {
					next = append(next, i)
				}
			}
			if k+1 < len(layers) {
				nl := layers[k+1]
				next = readsOf(func(o readOf) bool { return o.layer == nl && o.expert < 0 })
			}
			// With the experts (prefetch-both), as iocorr prefetch
			// --layers asks for them: at the layer's pick, after its
			// picked slices. Asked at the layer's start, they waited in
			// the cache through the layer's own reads: on the bench's
			// qwen3moe at 96 MiB (36 MiB of cache) the model had each
			// layer's attn_norm evicted before use, 7.8 major faults a
			// token against the prefetched runs' 0–0.6, and predicted
			// 1.35× their bytes.
			at, anchor := layerStart[l], inLayer
			if len(ex) > 0 {
				at, anchor = ex[0], ex
			}
			if len(next) > 0 {
				out = append(out, group{at: at, reads: next, anchor: anchor})
			}
		}
	}
	slices.SortStableFunc(out, func(a, b group) int { return a.at - b.at })
	return out
}

// leadKey names a read's lead time across calls: its tensor, and whether
// the request was the experts' (an expert slice's lead is its tensor's,
// whichever expert the router picked).
type leadKey struct {
	tensor  uint32
	experts bool
}

// leads are the trace's own lead times of a policy's requests: for every
// read a request covers, the compute time from the request's moment
// (group.anchor) to the read's first fault in the same call, less the
// faults waited on between (a prefetched run does not wait on those),
// the median over the decode calls that faulted on both.
func (r *Run) leads(pol string) map[leadKey]float64 {
	by := map[leadKey][]float64{}
	for i := range r.calls {
		c := &r.calls[i]
		if c.phase != event.PhaseDecode {
			continue
		}
		for _, g := range groups(c, pol) {
			t0, ok := uint64(0), false
			for _, j := range g.anchor {
				if t, f := r.firstFault[c.key(j)]; f && (!ok || t < t0) {
					t0, ok = t, true
				}
			}
			if !ok {
				continue
			}
			for _, j := range g.reads {
				tf, f := r.firstFault[c.key(j)]
				if !f || tf < t0 {
					continue
				}
				k := leadKey{c.of[j].tensor, g.experts}
				by[k] = append(by[k], float64(tf-t0-covered(r.stalls[c.token], t0, tf)))
			}
		}
	}
	out := map[leadKey]float64{}
	for k, v := range by {
		slices.Sort(v)
		out[k] = v[len(v)/2]
	}
	return out
}

// key is read j's weight's first-fault key in the call.
func (c *call) key(j int) faultKey {
	return faultKey{c.token, c.of[j].tensor, c.of[j].expert}
}

// arrivals is what a request still makes the graph wait, read by read:
// its reads arrive in order at rate (add's bytes is what the request
// read of a read, the resident pages skipped), and a read is needed lead
// ns of compute after the request, later by whatever the earlier reads
// already made it wait. It keeps the bytes arrived so far, the latest
// need and the stall they left.
type arrivals struct {
	rate, cum, need, stall float64
}

func (a *arrivals) add(bytes, lead float64) {
	a.cum += bytes
	a.need = max(a.need, lead)
	if arrive := a.cum / a.rate * 1e9; arrive > a.need+a.stall {
		a.stall = arrive - a.need
	}
}

// prefetched is a prefetch policy's simulation: its counts per phase,
// and per phase the bytes read on demand (faults) and the stall its
// requests left.
type prefetched struct {
	counts      phaseCounts
	demandBytes map[uint8]uint64
	// fetchedBytes is what its requests read (the pages not resident).
	fetchedBytes map[uint8]uint64
	stallNS      map[uint8]float64
	// window is the most bytes one request asked for: what a prefetcher
	// must hold in flight.
	window int64
	// askedBytes are what its requests covered, cached or not; keptBytes
	// those of them resident at the ask and not read in by the same call:
	// what the cache kept from an earlier token.
	askedBytes, keptBytes map[uint8]uint64
	// unmeasured counts the reads whose lead time no call measured: timed
	// with none. raced counts those the graph reached before the helper
	// asked for them, left to their faults.
	unmeasured, raced int
	// released counts the pages released (release): each brought in by
	// the helper for a layer before the one whose picks released it.
	released int
	// notes are where the rates its requests were timed at came from;
	// untimed says some request had no rate.
	notes   map[string]bool
	untimed bool
	// paced says some request arrived at the helper's pace, not at the
	// device's rate.
	paced bool
}

// simulatePrefetch runs the kernel model with a policy's requests made
// at their moments in each call's stream.
//
// With release, the pages a layer's requests brought in are released
// (pageCache.release) at the next layer's requests, as iocorr prefetch
// --release does at the next layer's picks: the layer has used them.
func (r *Run) simulatePrefetch(capacity int64, ra int32, pinned []pageRange, pol string, leads map[leadKey]float64, release bool) prefetched {
	c := newPageCache(r.pages, capacity, ra, pinned)
	// brought are the pages the current layer's requests read in.
	var brought []int32
	// readBy, snapshot at each call's start, tells a page the call read in.
	c.readBy, c.counting = make([]uint32, r.pages), true
	atStart := make([]uint32, r.pages)
	c.access(r.load())
	pace := r.pace()
	out := prefetched{counts: newCounts(), demandBytes: map[uint8]uint64{}, fetchedBytes: map[uint8]uint64{}, askedBytes: map[uint8]uint64{}, keptBytes: map[uint8]uint64{}, stallNS: map[uint8]float64{}, notes: map[string]bool{}}
	for i := range r.calls {
		cl := &r.calls[i]
		gs := groups(cl, pol)
		b0, m0 := c.readPages, c.majors
		copy(atStart, c.readBy)
		// helper is the helper's time per byte it brings in: its pace as
		// doctor measured it, else the run's own kernel work per byte.
		var helper, waitPerByte float64
		if m := r.byPhase[cl.phase]; m != nil {
			helper, waitPerByte = m.kernelPerByte(), m.waitPerByte()
		}
		if pace > 0 {
			helper = pace
		}
		for j, rg := range cl.reads {
			for len(gs) > 0 && gs[0].at == j {
				g := gs[0]
				gs = gs[1:]
				if release && (g.experts || !prefetchesExperts(pol)) {
					c.release(brought)
					out.released += len(brought)
					brought = brought[:0]
				}
				var span int64
				for _, k := range g.reads {
					span += int64(cl.reads[k].end-cl.reads[k].first) * pageSize
				}
				rate, note, timed := r.dev.rate(span)
				// The helper brings the pages in no faster than its own
				// work on them allows (allocating, reclaiming, sending the
				// reads), however fast the device: on the lab's VM ~1 GB/s
				// against a disk of 2.4.
				if pace > 0 && timed && 1e9/pace < rate {
					rate, out.paced = 1e9/pace, true
				}
				arr := arrivals{rate: rate}
				var asked int64
				// sent is what the helper has read in before a read's ask,
				// delay what the graph waited on the faults of the reads
				// it reached first.
				var sent, delay float64
				for idx, k := range g.reads {
					rk := cl.reads[k]
					l, ok := leads[leadKey{cl.of[k].tensor, g.experts}]
					// A read the graph reaches before the helper asks for
					// it faults as without a prefetcher, read-around and
					// all: the picks' first slice, which the graph reads
					// right after the router, before the pick has reached
					// the helper (the skewed router at 320 MiB: 60 of the
					// 74 major faults in picked slices were a layer's
					// first, on its slice's first page), and any the
					// helper's reads before it have not let it reach: each
					// takes the helper's work per byte (helper), and the graph
					// is later by its waits on what it faulted and on what had
					// not arrived.
					if g.experts && idx == 0 || ok && sent*helper >= max(arr.need, l+delay)+arr.stall {
						out.raced++
						d0 := c.readPages
						// The pick reaches the helper as the graph faults on
						// its first slice, and the helper asks for the rest
						// while the fault's window is read: the pages it
						// allocates first are its, and the window's async
						// marker is not set on one of them. With the marker
						// set, the graph's next slice started an async window
						// through the neighbours: on the skewed router at 192
						// MiB the model read 77.5 MB of ffn_down_exps a token
						// where the prefetched runs read 49–55 (their helper
						// asked for 50), and 324 MB in all against 262–284.
						first := g.experts && idx == 0
						if first {
							for _, k2 := range g.reads[1:] {
								c.claim = append(c.claim, cl.reads[k2])
							}
						}
						// The helper asks for the first slice too (iocorr
						// prefetch asks for every picked slice), and brings
						// in what the fault's window left of it: only the
						// first page is the fault's. Read by the graph, the
						// slice came a read-around at a time: on the demo
						// MoE on the 2 ms disk (128 KiB of read-ahead) the
						// model's faults read 21.9 MB a token at the plain
						// run's wait per byte, a 174 ms stall where the
						// prefetched runs stalled 126–132 (now 135).
						whole := rk
						if first {
							whole = pageRange{rk.first, min(rk.first+1, rk.end)}
						}
						var missing []int32
						if first && release {
							missing = c.missingIn(c.claim, nil)
							missing = c.missingIn([]pageRange{rk}, missing)
						}
						c.access(whole)
						c.claim = c.claim[:0]
						// The helper's mincore finds the picked pages the
						// fault's window is still reading not uptodate, the
						// faulted page too, so it asks for them and counts them
						// as its own: the releaser releases them with the rest.
						// Kept, the faulted first page outlived its slice and
						// the next token found it mapped: no fault, no
						// read-around, where the kernel's runs read 2–8 MB of
						// each layer's unpicked gate slices a token (qwen3moe
						// on the 300 MB/s disk: 33 MB of ffn_gate_exps a token
						// predicted, 55–59 read).
						for _, p := range missing {
							if c.resident(p) {
								brought = append(brought, p)
							}
						}
						got := (c.readPages - d0) * pageSize
						out.demandBytes[cl.phase] += got
						delay += float64(got) * waitPerByte
						if !first || whole.end >= rk.end {
							continue
						}
						rk = pageRange{whole.end, rk.end}
					}
					asked += int64(rk.end-rk.first) * pageSize
					out.askedBytes[cl.phase] += uint64(rk.end-rk.first) * pageSize
					for p := max(rk.first, 0); p < rk.end && p < c.n; p++ {
						if c.resident(p) && c.readBy[p] == atStart[p] {
							out.keptBytes[cl.phase] += pageSize
						}
					}
					var n uint64
					brought, n = c.prefetchInto(rk, brought)
					got := n * pageSize
					sent += float64(got)
					out.fetchedBytes[cl.phase] += got
					if !ok {
						out.unmeasured++
					}
					if timed {
						arr.add(float64(got), l+delay)
					}
				}
				out.window = max(out.window, asked)
				if timed {
					out.stallNS[cl.phase] += arr.stall
					out.notes[note] = true
				} else {
					out.untimed = true
				}
			}
			d0 := c.readPages
			c.access(rg)
			out.demandBytes[cl.phase] += (c.readPages - d0) * pageSize
		}
		out.counts[cl.phase][0] += (c.readPages - b0) * pageSize
		out.counts[cl.phase][1] += c.majors - m0
	}
	return out
}

// prefetchRow turns a prefetch simulation into the figures of one phase:
// the bytes and faults it read, the stall of its demand reads at the
// run's wait per byte plus what its requests left.
func (r *Run) prefetchRow(budget int64, pol string, ph uint8, got prefetched, why string) Row {
	row := r.row(budget, pol, ph, got.counts, why)
	m := r.byPhase[ph]
	if why != "" || m.calls == 0 {
		return row
	}
	n := float64(m.calls)
	row.Note = strings.Join(slices.Sorted(maps.Keys(got.notes)), "; ")
	if got.unmeasured > 0 {
		row.Note += fmt.Sprintf("; %d requested reads had no lead time in the trace (their weight never faulted after the request's moment in a decode call) and are timed with none", got.unmeasured)
	}
	if b, _, _ := r.bound(ph); b == rundir.BoundBandwidth {
		row.Note += "; " + BandwidthBoundNote
	}
	delete(row.NA, ColStall)
	delete(row.NA, ColTPS)
	switch {
	case got.untimed:
		row.NA[ColStall] = r.dev.why + " and the run carries no disk profile (iocorr doctor --disk)"
	case got.demandBytes[ph] > 0 && m.bytes == 0:
		row.NA[ColStall] = noWaitPerByte
	default:
		row.StallNSPerToken = got.stallNS[ph] / n
		if got.demandBytes[ph] > 0 {
			row.StallNSPerToken += float64(got.demandBytes[ph]) / n * m.waitPerByte()
		}
		// The kernel's work of bringing a page in (allocating it,
		// reclaiming another in the budget, unmapping that one from the
		// command) is done by the prefetcher's reads too, in the same
		// memory cgroup, and still reaches the command (reclaim of its
		// mapped pages, their TLB shootdowns, pages locked until their
		// reads are sent): the bench's prefetched runs computed longer
		// per token by about the fault wait per byte the plain run spent
		// with the disk idle. The prefetched bytes are charged that.
		row.StallNSPerToken += float64(got.fetchedBytes[ph]) / n * m.kernelPerByte()
	}
	// The helper's reads also slow the command's own compute, by what
	// the machine's disk profile measured (doctor's prefetch cost: the
	// kernel unmapping the command's pages from another CPU). The lab's
	// VM measured 0.62-0.66 ns a byte: without it, predict's tokens/s was
	// 1.26-1.45x the measured where the disk is fast.
	pc, why := r.disk.Prefetch()
	switch {
	case pc != nil:
		row.computeAdded = float64(got.fetchedBytes[ph]) / n * pc.ComputeNSPerByte
		if row.computeAdded > 0 {
			row.Note += fmt.Sprintf("; the helper's reads cost the command's compute %s a token (%.2f ns a byte, the disk profile's prefetch cost)",
				units.Duration(row.computeAdded), pc.ComputeNSPerByte)
		}
	case got.fetchedBytes[ph] > 0:
		row.Note += "; " + why + noPrefetchCost
	}
	if _, na := row.NA[ColStall]; !na {
		row.Note += helperBound(&row, m, pc, got.fetchedBytes[ph], got.paced)
		if perByte, note := r.stallFloor(ph, m); perByte > 0 {
			if floor := row.BytesReadPerToken * perByte; floor > row.StallNSPerToken {
				row.StallNSPerToken = floor
				row.Note += note
			}
		}
	}
	r.tps(&row, m)
	return row
}

// stallFloor is the least a prefetch row of phase ph may stall per byte
// it reads, and the note that says so where it binds; 0 where the run
// cannot tell. Where the device was the run's bound, the prefetch's reads
// queue behind the faults' on it: the bench's prefetched runs of
// bandwidth-bound decodes stalled ~1 ms a MB read, as their plain runs
// did, where the model timing them apart said 0.65–0.75 (tokens/s
// 1.15–1.8× the measured). Elsewhere more reads in flight serve faster,
// but no faster than the disk serves at its best depth: the demo MoE at a
// 128 KiB read-ahead, latency-bound with the device busy 0.73 of its
// decode, made bandwidth-bound by its prefetcher (busy 0.82), was
// predicted 1.24× the tokens/s of its traced prefetched runs with each
// request timed apart at the depth its bytes would keep, 109 MiB a token
// in 32 ms of stall: 3.6 GB/s from a disk whose best is 2.6 (2026-12-06).
func (r *Run) stallFloor(ph uint8, m *measured) (float64, string) {
	r.loadBounds()
	b := r.bounds[ph]
	switch {
	case b.bound == rundir.BoundBandwidth:
		return m.waitPerByte(), ""
	case b.bestBytesPerS > 0:
		return 1e9 / b.bestBytesPerS, "; " + fmt.Sprintf(BestRateNote, b.bestBytesPerS/1e6)
	}
	return 0, ""
}

// pace is the helper's CPU time per byte it asks for, as the disk
// profile's prefetch cost measured it (doctor's asking thread), 0 where
// the profile has none.
func (r *Run) pace() float64 {
	if pc, _ := r.disk.Prefetch(); pc != nil {
		return pc.AskNSPerByte
	}
	return 0
}

// helperBound holds a prefetch row's token to the helper's own time: one
// thread brings a token's fetched bytes in at its pace, and the token
// cannot end before they are in. In the bench's cases on the lab's VM the
// helpers spent 0.44–1.1 ns a byte asked, at most ~0.1 s of a 0.23 s
// token (the demo MoE at 160 MiB): there it does not bind, and it does
// where a token's compute is short beside the bytes it needs. It adds the
// wait to the row's stall and returns what the note says of it.
func helperBound(row *Row, m *measured, pc *rundir.PrefetchCost, fetched uint64, paced bool) string {
	var pace float64
	if pc != nil {
		pace = pc.AskNSPerByte
	}
	if pace <= 0 {
		if pc != nil && fetched > 0 {
			return "; " + rundir.NoPace + ": the helper's pace is not counted, and the tokens/s may be high"
		}
		return ""
	}
	note := ""
	if paced {
		note = fmt.Sprintf("; requests arrive at the helper's pace where the device is faster (%.2f ns a byte, the disk profile's prefetch cost)", pace)
	}
	helper := float64(fetched) / float64(m.calls) * pace
	if t := m.computePerCall() + row.computeAdded + row.StallNSPerToken; helper > t {
		row.StallNSPerToken += helper - t
		note += fmt.Sprintf("; the helper's %s a token bringing the prefetched bytes in bounds the token", units.Duration(helper))
	}
	return note
}

// noPrefetchCost says why a prefetch row's tokens/s leaves out what the
// helper's reads cost the command's compute.
const noPrefetchCost = ": what the helper's reads cost the command's compute is not counted, and the tokens/s may be high"

// Thresholds of the advice. A prefetch must be predicted to give
// minSpeedup× the kernel policy's decode tokens/s, reading at most
// maxBytes× its bytes, in every mode of the run (judge).
const (
	minSpeedup = 1.1
	maxBytes   = 1.05
	// bandwidthMaxBytes is the most of the kernel's bytes a prefetch may
	// be predicted to read on a bandwidth-bound decode. There it pays
	// only by the bytes it does not read (the picked slices instead of
	// the read-around's neighbours), never by more requests in flight,
	// and the model's bytes are its surer figure: the bench's case on a
	// disk held to 300 MB/s was predicted 0.55× the bytes and measured
	// 2.25× the tokens/s at 0.49×; an earlier VM's 128 KiB read-ahead
	// case was predicted 1.1× at 0.9× and measured 0.91× at 1.01×.
	bandwidthMaxBytes = 0.8
)

// judge is what plan makes of a prefetch predicted to give speed× the
// kernel policy's decode tokens/s at bytes× its bytes, on a decode that
// is bound: the speed it credits (on a bandwidth-bound decode no more
// than the bytes it saves: the device serves no faster; on a
// compute-bound one the same, as little of its stall is wait and the
// kernel's work in the faults shrinks only with the bytes), and why it
// fails, "" when it pays.
func judge(bound string, speed, bytes float64) (float64, string) {
	if bound == rundir.BoundBandwidth || bound == rundir.BoundCompute {
		speed = min(speed, 1/bytes)
		if bytes > bandwidthMaxBytes {
			return speed, fmt.Sprintf("%.2f× the bytes on a %s-bound decode, where only reading at most %.2f× pays", bytes, bound, bandwidthMaxBytes)
		}
	}
	if speed < minSpeedup || bytes > maxBytes {
		return speed, fmt.Sprintf("%.2f× the tokens/s and %.2f× the bytes", speed, bytes)
	}
	return speed, ""
}

// maxKeptForRelease is the most of a prefetcher's requests the cache may
// keep from an earlier token (in the model, without --release) for plan
// to advise --release. Release gives that up: a page brought in and used
// is let go before it could serve the next token. On the bench's nine
// cases the model kept under 2% everywhere but on the skewed router at
// 320 MiB (35–63%; its prefetched runs found 33–48% of the picked slices
// cached), where the model still predicted release faster and released
// runs read 2.2–2.5 GB against 1.7–2.2 and ran 6.4–7.0 tokens/s against
// 5.7–9.2 (2026-12-06).
const maxKeptForRelease = 0.05

// advise predicts every prefetch policy at budget, in every mode, and
// recommends the one with the most decode tokens/s where it pays in all.
func (r *Run) advise(budget, readahead int64, command []string) *pin.Prefetch {
	a := &pin.Prefetch{}
	bound, share, why := r.bound(event.PhaseDecode)
	switch bound {
	case "":
		a.Reason = "no prefetch: what the decode calls waited on is not known (" + why + ")"
		return a
	}
	capacity := r.capacityPages(budget, 0)
	ra := r.window(readahead)
	// The verdict is the run's, at its own window. A smaller window keeps
	// a latency-bound decode latency-bound (more, smaller reads, one at a
	// time), so there the verdict stands: the demo MoE at 96 MiB, latency-
	// bound with 16 MiB read-arounds, prefetched at 64 KiB was predicted
	// 1.28× and measured 1.24× (seven pairs, 2026-12-06). Elsewhere what
	// the decode would wait on is not known (a larger window can make it
	// bandwidth-bound, a smaller one a bandwidth-bound decode latency-
	// bound), and a prefetcher is judged by the stricter rule: it pays only
	// by the bytes it does not read.
	verdict := bound + "-bound"
	own, _ := r.ownWindow()
	if r.otherWindow(ra) && bound != rundir.BoundBandwidth && !(bound == rundir.BoundLatency && ra < own) {
		verdict = fmt.Sprintf("judged bandwidth-bound at this read-around (the run's own, %d KiB, was %s-bound)", int64(own)*pageSize>>10, bound)
		bound = rundir.BoundBandwidth
	}
	// The kernel's decode row in each of the run's own modes, what every
	// policy's prefetched modes are held to.
	kernel := map[string]Row{}
	for _, mode := range r.modes() {
		base, _ := r.simulate(capacity, modeWindow(mode, ra), nil, false)
		k := r.row(budget, PolicyKernel, event.PhaseDecode, base, "")
		if r.otherWindow(ra) {
			r.faultFloor(&k, event.PhaseDecode)
		}
		kernel[mode] = k
	}
	// try predicts pol (with release or not) in every mode: the worse
	// mode's judged speed-up, the largest request, the most of the
	// asked bytes the cache kept from an earlier token in a mode, and why
	// it does not pay ("" where it does).
	try := func(pol string, release bool, leads map[leadKey]float64) (speed float64, window int64, kept float64, fails string) {
		speed = math.Inf(1)
		for _, mode := range prefetchModes {
			// A prefetched run in the racing readers' mode is held to the
			// run's own mode where the run has no other: its one reader
			// races nobody without the helper.
			k, ok := kernel[mode]
			if !ok {
				k = kernel[ModeOne]
			}
			pf := r.simulatePrefetch(capacity, modeWindow(mode, ra), nil, pol, leads, release)
			p := r.prefetchRow(budget, pol, event.PhaseDecode, pf, "")
			window = max(window, pf.window)
			if n := pf.askedBytes[event.PhaseDecode]; n > 0 {
				kept = max(kept, float64(pf.keptBytes[event.PhaseDecode])/float64(n))
			}
			if len(k.NA)+len(p.NA) > 0 {
				return speed, window, kept, "its tokens/s or the kernel's is NA"
			}
			s, no := judge(bound, p.TokensPerS/k.TokensPerS, p.BytesReadPerToken/max(k.BytesReadPerToken, 1))
			speed = min(speed, s)
			if no != "" {
				return speed, window, kept, no + " of the kernel's policy in the " + mode + " mode"
			}
		}
		return speed, window, kept, ""
	}
	best, bestSpeed, bestRelease, why := "", 0.0, false, ""
	// The policies iocorr prefetch runs (both is its --layers); the next
	// layer's dense weights alone is a prediction, not a prefetcher.
	for _, pol := range []string{PolicyPrefetchExperts, PolicyPrefetchBoth} {
		leads := r.leads(pol)
		speed, window, kept, fails := try(pol, false, leads)
		if fails != "" {
			why += fmt.Sprintf("; %s: %s", pol, fails)
			continue
		}
		release := false
		if kept < maxKeptForRelease {
			if s, w, _, no := try(pol, true, leads); no == "" && s > speed {
				speed, window, release = s, w, true
			}
		}
		if speed > bestSpeed {
			best, bestSpeed, bestRelease, a.WindowBytes = pol, speed, release, window
		}
	}
	if best == "" {
		a.Reason = fmt.Sprintf("no prefetch: none is predicted to give %.1f× the decode tokens/s at ≤ %.2f× the bytes in every mode", minSpeedup, maxBytes) + why
		return a
	}
	a.Policy, a.Layers, a.Release = best, best == PolicyPrefetchBoth, bestRelease
	flags := ""
	if a.Layers {
		flags = "--layers "
	}
	if a.Release {
		flags += "--release "
	}
	a.Command = fmt.Sprintf("iocorr prefetch %s--window %d --mem-limit %d -- %s", flags, a.WindowBytes, budget, units.ShellJoin(command))
	how := "by more reads in flight"
	switch bound {
	case rundir.BoundBandwidth:
		how = "by reading fewer bytes (its tokens/s credited no more than the bytes it saves)"
	case rundir.BoundCompute:
		how = "by reading fewer bytes, and so less of the kernel's work in the faults (the decode's wait on the device is under a quarter of its time; its tokens/s credited no more than the bytes it saves)"
	}
	rel := ""
	if a.Release {
		rel = ", releasing what each layer used,"
	}
	a.Reason = fmt.Sprintf("%s%s is predicted to give %.2f× the kernel policy's decode tokens/s (the worse of the readers' modes; without a pin), the decode %s, the device busy %.0f%% of its time: it pays %s; its largest request is %d bytes", best, rel, bestSpeed, verdict, share*100, how, a.WindowBytes)
	return a
}
