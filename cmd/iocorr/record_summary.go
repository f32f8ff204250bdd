//go:build linux && !noloader

package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/internal/units"
	"github.com/iocorr/iocorr/recorder"
	"github.com/iocorr/iocorr/rundir"
)

// statusLine shows the recorder's progress on one terminal line, and
// clears it when the command has ended.
func statusLine(w io.Writer) func(recorder.Progress) {
	return func(p recorder.Progress) {
		if p.Done {
			fmt.Fprint(w, "\r\033[K")
			return
		}
		s := p.Stats
		fmt.Fprintf(w, "\r\033[Kiocorr: %s  tokens %d  faults %d major  pages +%d -%d  read %s  events %d",
			p.Elapsed.Truncate(100*time.Millisecond), s.Tokens(), s.Major, s.PagesAdded, s.Evicted, units.Bytes(float64(s.BlockRead)), s.Events)
	}
}

func printRecordSummary(w io.Writer, res *recorder.Result, dir string) {
	s := res.Stats
	m := &res.Meta
	var lost uint64
	for _, n := range m.Lost {
		lost += n
	}
	fmt.Fprintf(w, "iocorr: recorded %s in %s (%s)\n", strings.Join(m.Command, " "), m.End.Sub(m.Start).Truncate(time.Millisecond), exitText(m.Child))
	fmt.Fprintf(w, "  tokens      %d llama_decode calls: %d prefill (%d tokens), %d decode\n",
		s.Tokens(), s.Prefill, s.PrefillTokens, s.Decode)
	fmt.Fprintf(w, "  graphs      %d computed, %d ops probed\n", s.Graphs, s.Ops)
	fmt.Fprintf(w, "  faults      %d major, %d minor; in model files %d major, %d minor; stall %s (child majflt %d)\n",
		s.Major, s.Minor, s.MajorModel, s.MinorModel, units.Duration(float64(s.StallNS)), m.Child.MajFlt)
	fmt.Fprintf(w, "  tier        %s (probe sets %s)\n", m.Tier, m.ProbeSet)
	if p := m.Controls.Pinned; p != nil {
		fmt.Fprintf(w, "  pinned      %s locked in the command's cgroup: %d ranges of %s (plan %s); the holder's own memory %s\n", units.Bytes(float64(p.Bytes)), p.Ranges, p.Model, p.Plan, units.Bytes(float64(p.HolderAnon)))
	}
	if why := m.PageCacheNA(); why != "" {
		fmt.Fprintf(w, "  page cache  NA: %s\n", why)
	} else {
		fmt.Fprintf(w, "  page cache  model pages added %d (%s), evicted %d\n", s.PagesAdded, units.Bytes(float64(s.PagesAdded*kernel.PageSize)), s.Evicted)
	}
	if rs := m.ResidencySnapshots; rs != nil {
		fmt.Fprintf(w, "  residency   %d snapshots at token starts in %s of the recorder's time (%d starts too soon after one, %d replaced by the next)\n",
			rs.Taken, units.Duration(float64(rs.BusyNS)), rs.Throttled, rs.Replaced)
	}
	fmt.Fprintf(w, "  block       %d reads, %s read\n", s.BlockReqs, units.Bytes(float64(s.BlockRead)))
	if op := m.OpProbes; op != nil {
		fmt.Fprintf(w, "  op probes   on %s (%d CPU backends ran no graph, not probed)\n", strings.Join(op.Files, ", "), len(op.Idle))
		cost := "cost per hit NA: " + op.CalibrationNA
		if op.CalibrationNA == "" {
			cost = fmt.Sprintf("%s per hit here → %.1f%% of token time; %.2f–%.2f%% on bare metal (0.3–0.7 µs per hit)",
				units.Duration(float64(uint64(op.PerHitNS))), 100*op.OverheadRatio, 100*op.BareMetalOverheadRatio[0], 100*op.BareMetalOverheadRatio[1])
		}
		fmt.Fprintf(w, "              %.0f hits per token (max %d), %s\n", op.HitsPerTokenMean, op.HitsPerTokenMax, cost)
		if len(op.Unprobed) > 0 {
			fmt.Fprintf(w, "              no op function in this build for %v (nodes): inlined, not timed\n", op.Unprobed)
		}
		if len(op.Fused) > 0 {
			fmt.Fprintf(w, "              never ran their own function: %v (nodes): fused into a neighbour by the CPU backend\n", op.Fused)
		}
	}
	for i, n := range m.CapabilityNotes() {
		fmt.Fprintf(w, "  %-11s %s\n", map[bool]string{true: "kernel"}[i == 0], n)
	}
	fmt.Fprintf(w, "  events      %d recorded, %d lost\n", s.Events, lost)
	if lost > 0 {
		fmt.Fprintf(w, "iocorr: WARNING: %d events were lost; per type: %v\n", lost, m.Lost)
	}
	fmt.Fprintf(w, "  run         %s\n", dir)
}

func exitText(c rundir.Child) string {
	if c.Signal != "" {
		return "killed by " + c.Signal
	}
	return fmt.Sprintf("exit status %d", c.ExitCode)
}
