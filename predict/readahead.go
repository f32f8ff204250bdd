package predict

import (
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/pin"
)

// readaheadKBs are the read_ahead_kb values a plan weighs against the
// disk's own: powers of two from the smallest window that still reads a
// fault-around block's worth around a fault (32 KiB, twice it with
// llama.cpp's advice) to 4 MiB.
var readaheadKBs = []uint64{32, 64, 128, 256, 512, 1024, 2048, 4096}

// minReadaheadSpeedup is how many times the disk's own decode tokens/s a
// read_ahead_kb must be predicted to give, in every mode, to be advised:
// more than a prefetcher's 1.1, as the model at another window than the
// run's errs more. In the bench (run I) predict's tokens/s at the advised
// read-ahead were 0.87–1.28 of the plain runs' on the lab's disk, and a
// 1.12× prediction (the demo MoE from 128 KiB to 32 KiB) measured 1.09×
// and 1.01× in two sections, where the other cases, predicted 2.9–6.7×,
// measured 2.6–4.7×.
const minReadaheadSpeedup = 1.25

// adviseReadahead predicts the kernel's policy at budget under each
// read_ahead_kb of readaheadKBs, in every mode of the run, and recommends
// the one with the most decode tokens/s where it gives minReadaheadSpeedup× the
// disk's own in all of them. Under a budget the read-around is often most
// of what a token reads: the bench's demo MoE at 96 MiB read 483 MB a
// decode token with the lab disk's 8 MiB read-ahead and 133 with 128 KiB,
// at 3.4 and 13.2 tok/s (docs/measuring.md).
//
// The model times a phase's stall by its bytes (the run's wait per byte,
// measured with the run's own window); a smaller window makes more reads,
// and each pays at least the disk's latency at depth 1, as its profile
// measured it (faultFloor): on a latency-bound decode that is the cost.
// Without the profile those waits cannot be timed, and it advises
// nothing. Where it advises one, it says whether a prefetcher
// still pays at it (Run.advise at its window).
func (r *Run) adviseReadahead(budget int64, command []string) *pin.Readahead {
	a := &pin.Readahead{}
	kb := r.Model.Block.ReadAheadKB
	if kb == nil || *kb == 0 {
		a.Reason = "no read-ahead advice: the run did not record its disk's read_ahead_kb"
		return a
	}
	current := *kb
	a.CurrentKB = *kb
	if _, ok := r.dev.profile.ReadLatency(); !ok {
		a.Reason = "no read-ahead advice: the run carries no disk profile (iocorr doctor --disk) with a read at depth 1, so the latency the reads of another window pay is not known"
		return a
	}
	if why := r.noFigures; why != "" {
		a.Reason = "no read-ahead advice: " + why
		return a
	}
	capacity := r.capacityPages(budget, 0)
	if capacity <= 0 {
		a.Reason = fmt.Sprintf("no read-ahead advice: the budget %d is below the run's non-file memory (%d bytes)", budget, r.NonFile)
		return a
	}
	rows := func(setting uint64) ([]Row, string) {
		var out []Row
		for _, mode := range r.modes() {
			w := modeWindow(mode, readaround(setting))
			got, _ := r.simulate(capacity, w, nil, false)
			row := r.row(budget, PolicyKernel, event.PhaseDecode, got, "")
			if setting != current {
				r.faultFloor(&row, event.PhaseDecode)
			}
			for _, c := range slices.Sorted(maps.Keys(row.NA)) {
				return nil, c + ": " + row.NA[c]
			}
			out = append(out, row)
		}
		return out, ""
	}
	base, na := rows(*kb)
	if na != "" {
		a.Reason = "no read-ahead advice: the kernel's tokens/s at the disk's own read-ahead is NA (" + na + ")"
		return a
	}
	bestKB, bestSpeed, bestBytes := uint64(0), 0.0, 0.0
	for _, c := range readaheadKBs {
		if c == *kb {
			continue
		}
		got, na := rows(c)
		if na != "" {
			continue
		}
		speed, bytes := math.Inf(1), 0.0
		for i := range got {
			speed = min(speed, got[i].TokensPerS/base[i].TokensPerS)
			bytes = max(bytes, got[i].BytesReadPerToken/max(base[i].BytesReadPerToken, 1))
		}
		if speed > bestSpeed {
			bestKB, bestSpeed, bestBytes = c, speed, bytes
		}
	}
	modes := "the run's mode"
	if len(r.modes()) > 1 {
		modes = "the worse of the run's modes"
	}
	if bestKB == 0 || bestSpeed < minReadaheadSpeedup {
		a.Reason = fmt.Sprintf("no read-ahead advice: no read_ahead_kb of %v is predicted to give %.2f× the decode tokens/s of the disk's %d KiB at this budget (%s)", readaheadKBs, minReadaheadSpeedup, *kb, modes)
		if bestKB != 0 {
			a.Reason += fmt.Sprintf("; the best, %d KiB, %.2f×", bestKB, bestSpeed)
		}
		return a
	}
	a.KB, a.Speedup, a.BytesRatio = bestKB, &bestSpeed, &bestBytes
	// Whether a prefetcher still pays with it: a smaller read-around
	// leaves the prefetcher less of the neighbours' bytes to save (the
	// bench's demo MoE at 128 KiB, 0.89× the tokens/s where at the disk's
	// 8 MiB it gave 1.6×).
	a.Prefetch = r.advise(budget, int64(2*bestKB)<<10, command)
	// blockdev counts 512-byte sectors; on a partition it sets its disk's.
	a.Command = fmt.Sprintf("blockdev --setra %d /dev/%s", bestKB*2, r.Model.Block.Name)
	a.Reason = fmt.Sprintf("read_ahead_kb %d (a %d KiB fault read-around, as llama.cpp's POSIX_FADV_SEQUENTIAL doubles it) is predicted to give %.2f× the decode tokens/s of the disk's %d KiB at %.2f× the bytes (%s; without a pin or prefetcher); set it before the command opens the model (its file keeps the window it was opened with), and it applies to everything on the disk",
		bestKB, 2*bestKB, bestSpeed, *kb, bestBytes, modes)
	return a
}

// faultFloor holds a kernel row's stall, at a window other than the
// run's own, to its faults' reads: each device read a fault made (a
// window, sync or async, or a page read alone) pays at least the disk's
// latency at depth 1 before its bytes (the profile's ReadLatency), and
// through a window the graph scans faster than the disk serves it, the
// graph waits each out. The wait per byte the stall is otherwise timed at
// was measured with the run's own window: with a much smaller one, many
// more reads each pay the latency. On the bench's disk answering every
// read in 2 ms, the demo MoE at 96 MiB ran 0.35× the tokens/s with 64 KiB
// windows against its 256 KiB, where its bytes alone said 1.15×. The
// bytes' own time is the stall per byte's. Without a profile the row is
// left as it is.
func (r *Run) faultFloor(row *Row, ph uint8) {
	if _, na := row.NA[ColStall]; na {
		return
	}
	latency, ok := r.dev.profile.ReadLatency()
	if !ok {
		return
	}
	if floor := row.readsPerToken * latency; floor > row.StallNSPerToken {
		row.StallNSPerToken = floor
		r.tps(row, r.byPhase[ph])
	}
}

// otherWindow says whether ra is a read-around other than the one the
// run was recorded with (its disk's read_ahead_kb doubled): the run's
// wait per byte was measured with that one, and the rows of another are
// held to faultFloor. Where the run did not record its disk's window, ra
// was calibrated on the run: its own.
func (r *Run) otherWindow(ra int32) bool {
	own, known := r.ownWindow()
	return known && ra != own
}

// ownWindow is the read-around the run was recorded with, in pages: its
// disk's read_ahead_kb doubled; known is false where it was not recorded.
func (r *Run) ownWindow() (pages int32, known bool) {
	kb := r.Model.Block.ReadAheadKB
	if kb == nil || *kb == 0 {
		return 0, false
	}
	return readaround(*kb), true
}

// readaround is a mapped file's fault read-around, in pages, on a disk of
// kb read_ahead_kb: twice it, as llama.cpp advises the file
// POSIX_FADV_SEQUENTIAL.
func readaround(kb uint64) int32 {
	return int32(2 * int64(kb) << 10 / pageSize)
}
