package stats

import (
	"cmp"
	"container/heap"
	"fmt"
	"slices"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/internal/extsort"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/store"
)

// The I/O shape of a token or phase: is the token waiting on the device's
// bandwidth, on one fault at a time, or on neither?
//
// Its intervals are the models' block read requests (a request with a
// slice in a model file, from its last issue to its completion: a
// requeued request's earlier issues are not time on the device) and the
// faults in model files (stall: start to end). Each is clipped to the
// llama_decode calls it overlaps; time between calls is in no token.
//
//   - busy_share: the union of the requests' intervals ÷ the wall time.
//   - requests_in_flight_mean: the requests' summed time ÷ their union
//     (requests in flight on average while any is); _peak the most at once.
//   - read_bandwidth_mb_per_s: the bytes of the requests completed in the
//     token (or phase) ÷ its wall time; bandwidth_share that ÷ what the
//     disk served in `doctor --disk` at the mean depth observed and the
//     mean request's size, between the read sizes measured around it by
//     the size's logarithm (rundir.DiskProfile.BandwidthAt).
//   - depth_gain: what the disk served in the profile at its best depth
//     beyond the mean depth observed ÷ what it served at that depth, at
//     the same read size (rundir.DiskProfile.DepthGain): 1 where more
//     reads at once would only queue.
//   - faults_in_flight_mean, _peak: as the requests', of the faults.
//   - stall_share: the faults' union ÷ the wall time.
//   - wait_share: stall_share × the faults' summed wait ÷ their summed
//     stall (event.Counters.WaitNS: the threads asleep off the CPU, on the
//     device or a lock): the part of the stall more reads in flight can
//     take off the token.
//   - preempted_share: likewise of the faults' summed time preempted
//     (event.Counters.PreemptedNS: runnable off the CPU, the machine's
//     other work). The stall's rest is the kernel's work in the faults
//     (allocating, reclaiming under the budget, mapping), on a CPU, which
//     a prefetch lessens only by reading fewer bytes.
//
// The verdict is rundir.IOBound's rule (plan's prefetch advice applies
// the same). Where a figure of a step cannot be known (no disk profile,
// requests without completion) the verdict is NA with that reason, unless
// an earlier step decided.
const (
	// maxUnseenShare is the share of a span's requests that may lack a
	// completion before its time figures are NA: what they leave out is
	// within what the figures are held to (2%).
	maxUnseenShare     = 0.01
	naNoModelRequests  = "no block read requests of the models in this span"
	naNoFaultsInFlight = "no faults in the model files in this span"
	naNoDeviceTime     = "the span's block read requests of the models read no bytes or took no measurable time on the device: they keep no depth"
	naNoProfilePoint   = "the disk profile has no point at the span's depth and request size"
	naTokenTimeUnknown = "the token has no llama_decode entry and return times"
	naRequestsUnseen   = "block read requests of the models have no completion (their time on the device is unknown): "
	mbPerS             = 1e6
)

// IOShapeTable and IOShapeTokensTable name the I/O shape's tables: a row
// per phase (prefill, decode, all), and a row per token.
const (
	IOShapeTable       = "io_shape"
	IOShapeTokensTable = "io_shape_tokens"
)

// flight follows intervals given in order of their starts, clipped to
// [lo, hi): their union (busy), their summed clipped length (area: the
// mean number open while any is, times busy) and the most open at once.
type flight struct {
	u    union
	area uint64
	peak int
	open endHeap // ends of the intervals open at the last start
}

func newFlight(lo, hi uint64) flight { return flight{u: union{lo: lo, hi: hi}} }

func (f *flight) add(s, e uint64) {
	s, e = max(s, f.u.lo), min(e, f.u.hi)
	if s >= e {
		return
	}
	f.u.add(s, e)
	f.area += e - s
	// An interval ending as another starts is not open with it.
	for len(f.open) > 0 && f.open[0] <= s {
		heap.Pop(&f.open)
	}
	heap.Push(&f.open, e)
	f.peak = max(f.peak, len(f.open))
}

type endHeap []uint64

func (h endHeap) Len() int           { return len(h) }
func (h endHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h endHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)        { *h = append(*h, x.(uint64)) }
func (h *endHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// shape is what one token (or a phase's tokens summed) did on the device.
type shape struct {
	wall             uint64 // ns; 0 with timed false
	timed            bool
	busy, area       uint64 // requests
	peak             int
	stall, faultArea uint64 // faults
	faultPeak        int
	// stallSum, waitSum and preemptedSum are the faults' summed stall,
	// wait and time preempted (not a union): the shares of the stall
	// that were wait and preemption.
	stallSum, waitSum, preemptedSum uint64
	requests, unseen                int // model read requests completed (or not) in it
	bytes                           uint64
}

func (s *shape) sum(o *shape) {
	s.wall += o.wall
	s.timed = s.timed || o.timed
	s.busy, s.area, s.peak = s.busy+o.busy, s.area+o.area, max(s.peak, o.peak)
	s.stall, s.faultArea, s.faultPeak = s.stall+o.stall, s.faultArea+o.faultArea, max(s.faultPeak, o.faultPeak)
	s.stallSum, s.waitSum, s.preemptedSum = s.stallSum+o.stallSum, s.waitSum+o.waitSum, s.preemptedSum+o.preemptedSum
	s.requests, s.unseen, s.bytes = s.requests+o.requests, s.unseen+o.unseen, s.bytes+o.bytes
}

// span is one model read request with its completion.
type span struct{ issue, done uint64 }

var spanCodec = extsort.Ints(2, func(v *span) [extsort.MaxInts]int64 {
	return [extsort.MaxInts]int64{int64(v.issue), int64(v.done)}
}, func(v *span, a [extsort.MaxInts]int64) {
	v.issue, v.done = uint64(a[0]), uint64(a[1])
})

// shaper gathers the I/O shape from the records as they stream by.
type shaper struct {
	reqs     *extsort.Sorter[span]     // by issue
	faults   *extsort.Sorter[interval] // by token, start
	requests map[uint32]*shape         // counts and bytes by token
	// seen is every token the events name, with its phase: one the run
	// has no llama_decode record of still gets its row, NA with why.
	seen    map[uint32]uint8
	lastTok uint32 // the token last put in seen (seenAny: one was)
	seenAny bool
}

func newShaper() *shaper {
	return &shaper{
		reqs: extsort.New(sortBatch, func(a, b *span) int { return cmp.Compare(a.issue, b.issue) }, spanCodec),
		faults: extsort.New(sortBatch, func(a, b *interval) int {
			return cmp.Or(cmp.Compare(a.token, b.token), cmp.Compare(a.start, b.start))
		}, intervalCodec),
		requests: map[uint32]*shape{}, seen: map[uint32]uint8{}}
}

func (sh *shaper) Close() {
	sh.reqs.Close()
	sh.faults.Close()
}

// inModel says whether event e is a slice of a model file (its header
// included): the stall and the device time are the models'. A fault
// outside them may have come only as the kernel's count
// (rundir.Meta.FaultDetailNA), with no time of its own to join.
func inModel(e *event.Event) bool {
	return e.Tensor != event.TensorAnon && e.Tensor != event.TensorOther
}

// record takes one record (store.Store.Records).
func (sh *shaper) record(rec []event.Event) error {
	// Records come token by token: the map is asked only when the token
	// changes, not once an event.
	for i := range rec {
		if tok := rec[i].Token; !sh.seenAny || tok != sh.lastTok {
			if _, ok := sh.seen[tok]; !ok {
				sh.seen[tok] = rec[i].Phase
			}
			sh.lastTok, sh.seenAny = tok, true
		}
	}
	switch rec[0].Kind {
	case event.KindFault:
		for i := range rec {
			e := &rec[i]
			if (e.Class == event.ClassMajor || e.Class == event.ClassMinor) && inModel(e) {
				if err := sh.faults.Add(interval{e.Token, e.Ts - e.Dur, e.Ts}); err != nil {
					return err
				}
			}
		}
	case event.KindBlock:
		if !event.BlockRead(rec[0].Class) || !slices.ContainsFunc(rec, func(e event.Event) bool { return inModel(&e) }) {
			return nil
		}
		e := &rec[0]
		t := sh.requests[e.Token]
		if t == nil {
			t = &shape{}
			sh.requests[e.Token] = t
		}
		for i := range rec {
			t.bytes += rec[i].Bytes
		}
		if e.CompletionUnseen() {
			t.unseen++
			return nil
		}
		t.requests++
		return sh.reqs.Add(span{e.Ts - e.Dur, e.Ts})
	}
	return nil
}

// waits are each token's faults in the models, summed from the
// aggregates: their stall, and the parts of it that were wait and time
// preempted. A fault's wait is a counter, not a field of its event.
type waits map[uint32]faultTime

// faultTime is a token's faults' stall and the parts of it waited and
// preempted.
type faultTime struct{ stall, wait, preempted uint64 }

func (w waits) add(a *event.Agg) {
	if a.Tensor == event.TensorAnon || a.Tensor == event.TensorOther || a.StallNS == 0 {
		return
	}
	v := w[a.Token]
	w[a.Token] = faultTime{v.stall + a.StallNS, v.wait + a.WaitNS, v.preempted + a.PreemptedNS}
}

// everyToken is tokens with a TokenInfo of no times added for each token
// the events name that tokens lacks (their rows then say why they are
// NA, and their requests are counted, not dropped), in token order.
func (sh *shaper) everyToken(tokens []event.TokenInfo) []event.TokenInfo {
	have := map[uint32]bool{}
	for i := range tokens {
		have[tokens[i].Token] = true
	}
	n := len(tokens)
	for tok, phase := range sh.seen {
		if !have[tok] {
			tokens = append(tokens, event.TokenInfo{Token: tok, Phase: phase})
		}
	}
	if len(tokens) > n {
		slices.SortStableFunc(tokens, func(a, b event.TokenInfo) int { return cmp.Compare(a.Token, b.Token) })
	}
	return tokens
}

// window is one token's llama_decode call.
type window struct {
	ti     int // index in the tokens
	lo, hi uint64
}

// shapes is every token's shape, by index in tokens.
func (sh *shaper) shapes(tokens []event.TokenInfo, w waits) ([]shape, error) {
	out := make([]shape, len(tokens))
	var ws []window
	byToken := map[uint32]int{}
	for i := range tokens {
		t := &tokens[i]
		byToken[t.Token] = i
		ft := w[t.Token]
		out[i].stallSum, out[i].waitSum, out[i].preemptedSum = ft.stall, ft.wait, ft.preempted
		if r := sh.requests[t.Token]; r != nil {
			out[i].requests, out[i].unseen, out[i].bytes = r.requests, r.unseen, r.bytes
		}
		if t.StartNS != 0 && t.EndNS >= t.StartNS {
			out[i].wall, out[i].timed = t.EndNS-t.StartNS, true
			ws = append(ws, window{i, t.StartNS, t.EndNS})
		}
	}
	slices.SortStableFunc(ws, func(a, b window) int { return cmp.Compare(a.lo, b.lo) })
	if err := sh.requestFlights(ws, out); err != nil {
		return nil, err
	}
	if err := sh.faultFlights(ws, byToken, out); err != nil {
		return nil, err
	}
	return out, nil
}

// requestFlights clips the requests, in issue order, to each window in
// start order: those that may still overlap a window are held, no more.
func (sh *shaper) requestFlights(ws []window, out []shape) error {
	var held []span
	next := 0
	flush := func(upTo uint64) {
		// Windows that start before upTo have all their requests held.
		for ; next < len(ws) && ws[next].hi <= upTo; next++ {
			w := ws[next]
			held = slices.DeleteFunc(held, func(s span) bool { return s.done <= w.lo })
			f := newFlight(w.lo, w.hi)
			for _, s := range held {
				f.add(s.issue, s.done)
			}
			out[w.ti].busy, out[w.ti].area, out[w.ti].peak = f.u.total, f.area, f.peak
		}
	}
	err := sh.reqs.Each(func(s *span) error {
		flush(s.issue)
		held = append(held, *s)
		return nil
	})
	flush(^uint64(0))
	return err
}

// faultFlights takes each token's faults, in start order, within its
// window.
func (sh *shaper) faultFlights(ws []window, byToken map[uint32]int, out []shape) error {
	win := map[int]window{}
	for _, w := range ws {
		win[w.ti] = w
	}
	var f flight
	cur, have := -1, false
	end := func() {
		if have {
			out[cur].stall, out[cur].faultArea, out[cur].faultPeak = f.u.total, f.area, f.peak
		}
	}
	err := sh.faults.Each(func(iv *interval) error {
		ti, ok := byToken[iv.token]
		if !ok {
			return nil
		}
		if ti != cur {
			end()
			w, timed := win[ti]
			cur, have = ti, timed
			f = newFlight(w.lo, w.hi)
		}
		if have {
			f.add(iv.start, iv.end)
		}
		return nil
	})
	end()
	return err
}

// ioShapeColumns are the figures of a token's or phase's row, after its
// key columns.
var ioShapeColumns = cols("iffffiifiifffffifs",
	"wall_ns", "busy_share", "stall_share", "wait_share", "preempted_share", "requests", "requests_without_completion",
	"requests_in_flight_mean", "requests_in_flight_peak", "bytes_read_bytes", "read_bandwidth_mb_per_s",
	"device_bandwidth_mb_per_s", "bandwidth_share", "depth_gain", "faults_in_flight_mean", "faults_in_flight_peak",
	"request_size_mean_bytes", "verdict")

// shapeRun is what a shape's figures need of the run: its disk profile
// (nil: diskNA says why) and why its block requests are NA, if they are.
type shapeRun struct {
	disk                    *rundir.DiskProfile
	diskNA, blockNA, waitNA string
}

func newShapeRun(meta *rundir.Meta) shapeRun {
	return shapeRun{disk: meta.Disk, diskNA: meta.DiskNA(), blockNA: cmp.Or(meta.CapabilityNA(rundir.CapBlock), meta.ModelBlockNA()), waitNA: meta.CounterNA("fault_wait_ns")}
}

// figures is s as a row of ioShapeColumns.
func (s *shape) figures(run shapeRun) []Value {
	disk, diskNA := run.disk, run.diskNA
	if !s.timed || s.wall == 0 {
		row := []Value{NA(naTokenTimeUnknown)}
		for range ioShapeColumns[1:] {
			row = append(row, NA(naTokenTimeUnknown))
		}
		if run.blockNA == "" {
			row[5], row[6], row[9] = I64(s.requests), I64(s.unseen), I64(s.bytes)
		}
		return row
	}
	wall := float64(s.wall)
	// The requests' time on the device: NA where too many of them have
	// no completion to tell it.
	timesNA := run.blockNA
	if all := s.requests + s.unseen; timesNA == "" && s.unseen > 0 && float64(s.unseen) > maxUnseenShare*float64(all) {
		timesNA = fmt.Sprintf("%s%d of %d", naRequestsUnseen, s.unseen, all)
	}
	busy, inFlight, peak := F64(float64(s.busy)/wall, ""), ratio(float64(s.area), float64(s.busy), naNoModelRequests), I64(s.peak)
	if timesNA != "" {
		busy, inFlight, peak = NA(timesNA), NA(timesNA), NA(timesNA)
	}
	achieved := float64(s.bytes) / (wall / 1e9)
	device, share, gain := NA(diskNA), NA(diskNA), NA(diskNA)
	var devBW float64
	switch {
	case diskNA != "":
	case timesNA != "":
		device, share, gain = NA(timesNA), NA(timesNA), NA(timesNA)
	case s.requests == 0:
		device, share, gain = NA(naNoModelRequests), NA(naNoModelRequests), NA(naNoModelRequests)
	case s.busy == 0 || s.bytes == 0:
		device, share, gain = NA(naNoDeviceTime), NA(naNoDeviceTime), NA(naNoDeviceTime)
	default:
		depth, size := float64(s.area)/float64(s.busy), float64(s.bytes)/float64(s.requests+s.unseen)
		bw, ok := disk.BandwidthAt(depth, size)
		g, gok := disk.DepthGain(depth, size)
		if !ok || !gok {
			device, share, gain = NA(naNoProfilePoint), NA(naNoProfilePoint), NA(naNoProfilePoint)
			break
		}
		devBW = bw
		device, share, gain = F64(bw/mbPerS, ""), F64(achieved/bw, "the disk profile has a bandwidth of 0"), F64(g, "")
	}
	size := ratio(float64(s.bytes), float64(s.requests+s.unseen), naNoModelRequests)
	faultsMean, faultsPeak := ratio(float64(s.faultArea), float64(s.stall), naNoFaultsInFlight), I64(s.faultPeak)
	if s.stall == 0 {
		faultsPeak = NA(naNoFaultsInFlight)
	}
	wait, preempted := s.stallPart(s.waitSum, run.waitNA), s.stallPart(s.preemptedSum, run.waitNA)
	judged := wait.F
	if wait.NA != "" {
		// Untimed waits are at most the stall.
		judged = float64(s.stall) / wall
	}
	verdict := verdictOf(judged, busy, share, gain, devBW)
	requests, unseen, bytes, bandwidth := I64(s.requests), I64(s.unseen), I64(s.bytes), F64(achieved/mbPerS, "")
	if run.blockNA != "" {
		requests, unseen, bytes, bandwidth, size = NA(run.blockNA), NA(run.blockNA), NA(run.blockNA), NA(run.blockNA), NA(run.blockNA)
	}
	return []Value{I64(s.wall), busy, F64(float64(s.stall)/wall, ""), wait, preempted, requests, unseen,
		inFlight, peak, bytes, bandwidth, device, share, gain, faultsMean, faultsPeak, size, verdict}
}

// stallPart is the stall share times the share of the faults' stall that
// part is of it, summed (wait or time preempted; NA with waitNA where the
// run did not time them).
func (s *shape) stallPart(part uint64, waitNA string) Value {
	switch {
	case waitNA != "":
		return NA(waitNA)
	case s.stall == 0:
		return F64(0, "")
	case s.stallSum == 0:
		return NA("the token's faults in the models have no stall in the aggregates")
	}
	return F64(float64(s.stall)/float64(s.wall)*float64(part)/float64(s.stallSum), "")
}

// verdictOf applies rundir.IOBound to a span's wait share, busy share,
// bandwidth share and depth gain (either NA with its reason). A span
// without requests of the models, or whose requests read nothing
// measurable, gets nothing of the device: its bandwidth share and depth
// gain are no step.
func verdictOf(waitShare float64, busy, bwShare, gain Value, deviceBW float64) Value {
	bw, bwKnown := 0.0, bwShare.NA == "" || bwShare.NA == naNoModelRequests || bwShare.NA == naNoDeviceTime
	if bwShare.NA == "" && deviceBW > 0 {
		bw = bwShare.F
	}
	switch b := rundir.IOBound(waitShare, busy.F, busy.NA == "", bw, bwKnown, gain.F, gain.NA == ""); {
	case b != "":
		return Str(b)
	case busy.NA != "":
		return NA(busy.NA)
	}
	return NA(bwShare.NA)
}

// ioShape is the phase table and the token table.
func ioShape(tokens []event.TokenInfo, shapes []shape, meta *rundir.Meta) (Table, Table) {
	run := newShapeRun(meta)
	ph := Table{Name: IOShapeTable, Title: "I/O shape by phase: the models' device busy share, requests and faults in flight, bandwidth against the disk's own, and the verdict (compute, latency or bandwidth)",
		Columns: append(cols("si", "phase", "tokens"), ioShapeColumns...)}
	for _, p := range phases {
		var sum shape
		n := 0
		for i := range tokens {
			if p.sel(tokens[i].Phase) {
				sum.sum(&shapes[i])
				n++
			}
		}
		row := []Value{Str(p.name), I64(n)}
		if n == 0 {
			for range ioShapeColumns {
				row = append(row, NA(naNoTokens))
			}
		} else {
			row = append(row, sum.figures(run)...)
		}
		ph.add(row...)
	}
	tt := Table{Name: IOShapeTokensTable, Title: "I/O shape per token", Long: true,
		Columns: append(cols("is", "token", "phase"), ioShapeColumns...)}
	for i := range tokens {
		tt.add(append([]Value{I64(tokens[i].Token), Str(event.PhaseName(tokens[i].Phase))}, shapes[i].figures(run)...)...)
	}
	return ph, tt
}

// IOShape computes the I/O shape tables (IOShapeTable, IOShapeTokensTable)
// of a run alone, for the commands that show it beside other figures
// (query --by token, export faults-per-token) without every table of
// Compute.
func IOShape(recorded *store.Run) (phases, tokens *Table, err error) {
	st, meta := recorded.Store, recorded.Meta
	toks, err := st.Tokens()
	if err != nil {
		return nil, nil, fmt.Errorf("reading tokens: %w", err)
	}
	sh := newShaper()
	defer sh.Close()
	if err := st.Records(store.EventFilter{}, sh.record); err != nil {
		return nil, nil, fmt.Errorf("reading events: %w", err)
	}
	w := waits{}
	if err := st.Aggs(func(a *event.Agg) error { w.add(a); return nil }); err != nil {
		return nil, nil, fmt.Errorf("reading aggregates: %w", err)
	}
	toks = sh.everyToken(toks)
	shapes, err := sh.shapes(toks, w)
	if err != nil {
		return nil, nil, fmt.Errorf("reading events: %w", err)
	}
	ph, tt := ioShape(toks, shapes, meta)
	return &ph, &tt, nil
}
