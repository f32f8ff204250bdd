//go:build linux

// Package blocktrace is the tests' independent record of a disk's read
// completions: an ftrace instance of its own recording the classic
// tracepoints block:block_rq_complete (sector and nr_sector as the kernel
// formats them from the request; iocorr reads struct request through
// tp_btf) and block:block_rq_requeue.
//
// ftrace, not a BPF program: a completion now and then runs no BPF
// program at all on this VM, neither a classic tracepoint's nor a tp_btf
// one, with no recursion miss counted (bpf/crosscheck_test.go), and a
// classic tracepoint's BPF program is also skipped while another one runs
// on the CPU; ftrace's own buffer records every firing, and says when it
// overwrote any (overrun), which fails the test.
//
// The kernel filters the events to the sectors the test asks about, so
// what the rest of the machine reads meanwhile neither fills the buffer
// nor reaches the comparison.
package blocktrace

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// Range is the disk sectors [Start, End) (512 bytes each) a test reads.
type Range struct{ Start, End uint64 }

// Completion is one read request the disk completed: Sectors sectors
// from Sector. Ts is when (CLOCK_MONOTONIC, as bpf_ktime_get_ns, to the
// microsecond ftrace prints), set by a trace from StartTimed.
type Completion struct{ Sector, Sectors, Ts uint64 }

// Issue is one read request issued to the disk (a trace from StartTimed):
// Sectors sectors from Sector, at Ts (CLOCK_MONOTONIC, to the µs).
type Issue struct{ Sector, Sectors, Ts uint64 }

// Trace is a running ftrace instance; Stop fills Completions and
// Requeues.
type Trace struct {
	dir    string
	ranges []Range
	// Completions are the read completions that touch the ranges, in the
	// order ftrace printed them.
	Completions []Completion
	// Requeues counts block_rq_requeue of requests that touch the ranges.
	Requeues uint64
	// Issues are the read issues that touch the ranges, in time order,
	// when the trace was started by StartTimed.
	Issues []Issue
	timed  bool
}

const tracefs = "/sys/kernel/tracing"

var instances atomic.Uint64

// maxFilterRanges bounds the filter: the kernel takes at most a page of
// filter text, and a range costs about 50 bytes of it.
const maxFilterRanges = 48

// Start records the read completions and requeues on disk (the kernel's
// dev_t, major<<20 | minor, of the whole disk) that touch ranges, until
// Stop. It must be called before the test's I/O.
func Start(t testing.TB, disk uint32, ranges []Range) *Trace {
	t.Helper()
	return start(t, disk, ranges, false)
}

// StartTimed is Start that also records the read issues (block_rq_issue),
// and every event's time on the clock BPF's are on (ftrace's "mono"): a
// request's time on the device is from its last issue to its completion.
func StartTimed(t testing.TB, disk uint32, ranges []Range) *Trace {
	t.Helper()
	return start(t, disk, ranges, true)
}

func start(t testing.TB, disk uint32, ranges []Range, timed bool) *Trace {
	t.Helper()
	if len(ranges) == 0 {
		t.Fatal("blocktrace: no sectors to trace")
	}
	ensureTracefs(t)
	tr := &Trace{
		dir:    filepath.Join(tracefs, "instances", fmt.Sprintf("iocorr-blocktrace-%d-%d", os.Getpid(), instances.Add(1))),
		ranges: slices.Clone(ranges),
		timed:  timed,
	}
	if err := os.Mkdir(tr.dir, 0o700); err != nil {
		t.Fatalf("blocktrace: an ftrace instance: %v", err)
	}
	t.Cleanup(func() {
		os.WriteFile(filepath.Join(tr.dir, "tracing_on"), []byte("0"), 0)
		os.WriteFile(filepath.Join(tr.dir, "events", "enable"), []byte("0"), 0)
		if err := os.Remove(tr.dir); err != nil {
			t.Errorf("blocktrace: removing the ftrace instance: %v", err)
		}
	})
	set := func(name, v string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(tr.dir, name), []byte(v), 0); err != nil {
			t.Fatalf("blocktrace: ftrace %s = %q: %v", name, v, err)
		}
	}
	sectors := kernelFilter(filterRanges(ranges, maxRequestSectors(disk)))
	// Every CPU's buffer holds the whole run: a cold MoE run completes a
	// few thousand reads of its model, ~100 bytes each in the buffer.
	set("buffer_size_kb", "16384")
	set("events/block/block_rq_complete/filter", fmt.Sprintf(`dev == %d && rwbs ~ "R*" && (%s)`, disk, sectors))
	set("events/block/block_rq_requeue/filter", fmt.Sprintf(`dev == %d && (%s)`, disk, sectors))
	set("events/block/block_rq_complete/enable", "1")
	set("events/block/block_rq_requeue/enable", "1")
	if timed {
		set("trace_clock", "mono")
		set("events/block/block_rq_issue/filter", fmt.Sprintf(`dev == %d && rwbs ~ "R*" && (%s)`, disk, sectors))
		set("events/block/block_rq_issue/enable", "1")
	}
	set("tracing_on", "1")
	return tr
}

// ensureTracefs mounts tracefs where it is not mounted yet (it is not by
// default on the lab's VM). It stays mounted: other tools expect it.
func ensureTracefs(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(tracefs, "instances")); err == nil {
		return
	}
	if err := unix.Mount("nodev", tracefs, "tracefs", 0, ""); err != nil {
		t.Fatalf("blocktrace: mounting tracefs at %s: %v", tracefs, err)
	}
	if _, err := os.Stat(filepath.Join(tracefs, "instances")); err != nil {
		t.Fatalf("blocktrace: tracefs has no instances: %v", err)
	}
}

// maxRequestSectors is the largest request the disk makes, in sectors
// (max_sectors_kb, which the block layer splits requests to):
// the filter has no arithmetic, so a request that starts before a range
// and runs into it is caught by starting the range that much earlier.
// Unknown, it is a generous 32 MiB.
func maxRequestSectors(disk uint32) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/sys/dev/block/%d:%d/queue/max_sectors_kb", disk>>20, disk&0xfffff))
	if err == nil {
		if kb, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && kb > 0 {
			return kb * 2
		}
	}
	return 32 << 11
}

// filterRanges widens each range back by the largest request, sorts and
// merges them, and merges the closest neighbours until they fit in a
// filter. Wider only ever lets more in: Stop keeps exactly the requests
// that touch the ranges asked for.
func filterRanges(ranges []Range, slack uint64) []Range {
	rs := make([]Range, len(ranges))
	for i, r := range ranges {
		rs[i] = Range{r.Start - min(r.Start, slack), r.End}
	}
	slices.SortFunc(rs, func(a, b Range) int { return cmpUint(a.Start, b.Start) })
	out := rs[:1]
	for _, r := range rs[1:] {
		if last := &out[len(out)-1]; r.Start <= last.End {
			last.End = max(last.End, r.End)
		} else {
			out = append(out, r)
		}
	}
	for len(out) > maxFilterRanges {
		best := 0
		for i := 1; i < len(out)-1; i++ {
			if out[i+1].Start-out[i].End < out[best+1].Start-out[best].End {
				best = i
			}
		}
		out[best].End = out[best+1].End
		out = slices.Delete(out, best+1, best+2)
	}
	return out
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func kernelFilter(rs []Range) string {
	terms := make([]string, len(rs))
	for i, r := range rs {
		terms[i] = fmt.Sprintf("(sector >= %d && sector < %d)", r.Start, r.End)
	}
	return strings.Join(terms, " || ")
}

// completionLine is what block_rq_complete prints: "MAJ,MIN RWBS (CMD)
// SECTOR + NR_SECTOR ..." (newer kernels add the I/O priority after).
var completionLine = regexp.MustCompile(`block_rq_complete: \d+,\d+ (\S+) \([^)]*\) (\d+) \+ (\d+)`)

// requeueLine is block_rq_requeue's: "MAJ,MIN RWBS (CMD) SECTOR + NR_SECTOR ...".
var requeueLine = regexp.MustCompile(`block_rq_requeue: \d+,\d+ (\S+) \([^)]*\) (\d+) \+ (\d+)`)

// issueLine is block_rq_issue's: "MAJ,MIN RWBS BYTES (CMD) SECTOR + NR_SECTOR ...".
var issueLine = regexp.MustCompile(`block_rq_issue: \d+,\d+ (\S+) \d+ \([^)]*\) (\d+) \+ (\d+)`)

// stampLine is the time ftrace prints before the event's name: seconds,
// a point and microseconds.
var stampLine = regexp.MustCompile(` (\d+)\.(\d{6}): block_rq_`)

// Stop ends the trace and reads what it recorded of the ranges, failing
// the test when the buffer overwrote or dropped anything.
func (tr *Trace) Stop(t testing.TB) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(tr.dir, "tracing_on"), []byte("0"), 0); err != nil {
		t.Fatal(err)
	}
	stats, err := filepath.Glob(filepath.Join(tr.dir, "per_cpu", "cpu*", "stats"))
	if err != nil || len(stats) == 0 {
		t.Fatalf("blocktrace: the ftrace instance's per-CPU stats: %v", err)
	}
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(l, ":")
			if ok && (k == "overrun" || k == "dropped events") && strings.TrimSpace(v) != "0" {
				t.Fatalf("blocktrace: the ftrace oracle lost events (%s: %s %s)", p, k, strings.TrimSpace(v))
			}
		}
	}
	f, err := os.Open(filepath.Join(tr.dir, "trace"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		var re *regexp.Regexp
		switch {
		case strings.HasPrefix(line, "#"):
			continue
		case strings.Contains(line, "block_rq_requeue:"):
			re = requeueLine
		case strings.Contains(line, "block_rq_complete:"):
			re = completionLine
		case strings.Contains(line, "block_rq_issue:"):
			re = issueLine
		default:
			continue
		}
		m := re.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("blocktrace: ftrace printed a line this test cannot read: %q", line)
		}
		s, _ := strconv.ParseUint(m[2], 10, 64)
		n, _ := strconv.ParseUint(m[3], 10, 64)
		if !tr.touches(s, n) {
			continue
		}
		var ts uint64
		if tr.timed {
			if ts, err = stamp(line); err != nil {
				t.Fatal(err)
			}
		}
		switch re {
		case requeueLine:
			tr.Requeues++
		case issueLine:
			tr.Issues = append(tr.Issues, Issue{s, n, ts})
		default:
			tr.Completions = append(tr.Completions, Completion{s, n, ts})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

// stamp is the time of a line of a timed trace, in nanoseconds.
func stamp(line string) (uint64, error) {
	m := stampLine.FindStringSubmatch(line)
	if m == nil {
		return 0, fmt.Errorf("blocktrace: no time in the line %q", line)
	}
	sec, _ := strconv.ParseUint(m[1], 10, 64)
	us, _ := strconv.ParseUint(m[2], 10, 64)
	return sec*1e9 + us*1e3, nil
}

func (tr *Trace) touches(sector, sectors uint64) bool {
	for _, r := range tr.ranges {
		if sector < r.End && sector+sectors > r.Start {
			return true
		}
	}
	return false
}
