package recorder_test

// The tracer's two page-cache records of one workload, charged by the
// correlator: a test of the loader and the joins together, kept with the
// recorder (which links both) so that correlate's own tests build
// wherever the read side does.

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/correlate"
	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/internal/blockdev"
	"github.com/iocorr/iocorr/internal/cgroup"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/internal/pagecache"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/testenv"
	"github.com/iocorr/iocorr/wire"
)

// ringRecords copies every record of a tracer's ring until stop is closed
// and the ring has then been quiet for a while.
func ringRecords(rd *bpf.Ring, stop <-chan struct{}) ([][]byte, error) {
	var (
		out   [][]byte
		rec   ringbuf.Record
		quiet int
	)
	for {
		rd.SetDeadline(time.Now().Add(20 * time.Millisecond))
		err := rd.ReadInto(&rec)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			select {
			case <-stop:
				if quiet++; quiet >= 5 {
					return out, nil
				}
			default:
			}
			continue
		}
		if err != nil {
			return out, err
		}
		quiet = 0
		out = append(out, append([]byte(nil), rec.RawSample...))
	}
}

// pageTrack is what the page-cache records of a run say, replayed.
type pageTrack struct {
	records  int           // page-cache records (folios or runs)
	resident map[int64]int // file page → resident after the replay
	order    int           // adds and deletes of a page that came in the wrong order
}

// replayPages replays a tracer's page-cache records of file (dev, ino) in
// ring order, as the residency replay reads them: a page deleted while
// not resident, or added while resident, is an ordering error.
func replayPages(recs [][]byte, dev uint32, ino uint64) pageTrack {
	pt := pageTrack{resident: map[int64]int{}}
	var ds ingest.DecodeStats
	apply := func(add bool, first, n int64) {
		for p := first; p < first+n; p++ {
			if (pt.resident[p] == 1) == add {
				pt.order++
			}
			if add {
				pt.resident[p] = 1
			} else {
				delete(pt.resident, p)
			}
		}
	}
	for _, rec := range recs {
		r, ok := ingest.Decode(rec, &ds)
		if !ok {
			continue
		}
		if p := r.PageRun(); p != nil && p.Dev == dev && p.Ino == ino {
			pt.records++
			add := p.Kind == uint16(wire.EventTypeEV_PAGE_ADD)
			if !p.Ranges(func(first, n uint64) { apply(add, int64(first), int64(n)) }) {
				pt.order++
			}
		}
		if p := r.Page(); p != nil && r.Type != uint16(wire.EventTypeEV_FILEMAP_FAULT) && p.Dev == dev && p.Ino == ino {
			pt.records++
			apply(r.Type == uint16(wire.EventTypeEV_PAGE_ADD), int64(p.Index), int64(1)<<p.Order)
		}
	}
	return pt
}

// attribute correlates a tracer's records over meta.
func attribute(t *testing.T, meta *rundir.Meta, recs [][]byte) *correlate.Result {
	t.Helper()
	c, err := correlate.New(meta, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Attribute(recs)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestPageRunsChargeWhatFoliosCharge records one real workload with the
// tracer writing both page-cache records side by side, the runs and a
// record per folio, into one ring: the page toucher reading a file
// twice with readahead, in a memory cgroup far smaller than the file, so
// that readahead windows, reclaim in the toucher's own thread, and
// refaults all happen. Both are attributed over the same tensor table
// (tensor and expert boundaries off page boundaries), each with the same
// faults, blocks and stamps: every aggregate — per tensor, expert and
// token: pages and bytes added and evicted, readahead trigger and landed
// bytes, faults — must be equal, and
// replaying either in ring order must end with the page cache mincore
// sees, with no add or delete of a page out of order.
func TestPageRunsChargeWhatFoliosCharge(t *testing.T) {
	testenv.RequireBPF(t)
	const (
		pages = 12288 // 48 MiB
		limit = 16 << 20
	)
	toucher := llmtest.BuildToucher(t)
	data := make([]byte, pages*kernel.PageSize)
	for i := range data {
		data[i] = byte(i / kernel.PageSize)
	}
	path := testenv.DiskFile(t, data)
	id, err := blockdev.StatFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Tensors cut mid-page, and an expert tensor whose slices are not page
	// multiples either.
	meta := &rundir.Meta{Models: []rundir.ModelFile{{
		Path: path, Dev: id.Dev, Ino: id.Ino, Size: int64(len(data)),
		Tensors: []rundir.Tensor{
			{Name: "blk.0.attn_q.weight", Offset: 5000, Size: 3<<20 + 123, Layer: 0, Role: "attn_q"},
			{Name: "blk.0.ffn_up_exps.weight", Offset: 4 << 20, Size: 8 * 3000000, Layer: 0, Role: "ffn_up_exps",
				Experts: 8, ExpertStride: 3000000},
			{Name: "output.weight", Offset: 30 << 20, Size: 17<<20 + 1000, Layer: -1, Role: "output"},
		},
	}}}

	var list []string
	for pass := 0; pass < 2; pass++ {
		for p := 0; p < pages; p += 3 {
			list = append(list, strconv.Itoa(p))
		}
	}
	w := llmtest.StartWaitingToucher(t, toucher, "-file", path, "-pages", strings.Join(list, ","), "-advice", "normal", "-evict")
	pid := w.PID
	cg, err := cgroup.NewMemory(cgroup.Name(pid), limit)
	if err != nil {
		t.Skipf("no memory cgroup: %v", err)
	}
	defer cg.Remove()
	if err := cg.Add(pid); err != nil {
		t.Fatal(err)
	}

	tr, err := bpf.Open(bpf.Options{PageRecords: bpf.PageRunsAndFolios})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := tr.AddFile(id.Dev, id.Ino); err != nil {
		t.Fatal(err)
	}
	if err := tr.TracePID(pid); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var (
		all     [][]byte
		readErr error
		done    = make(chan struct{})
	)
	go func() {
		defer close(done)
		all, readErr = ringRecords(tr.RingBuf(), stop)
	}()
	if err := w.Go(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Wait(); err != nil {
		t.Fatal(err)
	}
	// Reclaim goes on evicting the file's pages after the toucher has
	// gone (other tests' memory): the file leaves the tracer between two
	// mincore maps, so that both records end at one cut, and what was
	// resident at it lies between the two maps.
	before, _, err := pagecache.ResidentRanges(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.RemoveFile(id.Dev, id.Ino); err != nil {
		t.Fatal(err)
	}
	after, _, err := pagecache.ResidentRanges(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.FlushPageRuns(); err != nil {
		t.Fatal(err)
	}
	close(stop)
	<-done
	if readErr != nil {
		t.Fatalf("reading the ring: %v", readErr)
	}
	// An eviction in flight at the cut may have written its folio record
	// and not yet its run when the runs were flushed: the ring has since
	// been quiet, so a second flush holds it.
	if err := tr.FlushPageRuns(); err != nil {
		t.Fatal(err)
	}
	rest, err := ringRecords(tr.RingBuf(), stop)
	if err != nil {
		t.Fatalf("reading the ring: %v", err)
	}
	all = append(all, rest...)
	lost, err := tr.Lost()
	if err != nil {
		t.Fatal(err)
	}
	for typ, n := range lost {
		if n != 0 {
			t.Fatalf("lost %d %s events: the runs and the folios are not of the same events", n, typ)
		}
	}
	// One stream, two records: everything but the folios, and everything
	// but the runs.
	var recs [2][][]byte
	for _, rec := range all {
		switch ingest.RecordType(rec) {
		case uint16(wire.EventTypeEV_PAGE_ADD), uint16(wire.EventTypeEV_PAGE_DEL):
			recs[1] = append(recs[1], rec)
		case uint16(wire.EventTypeEV_PAGE_RUN):
			recs[0] = append(recs[0], rec)
		default:
			recs[0] = append(recs[0], rec)
			recs[1] = append(recs[1], rec)
		}
	}

	pr, pf := replayPages(recs[0], id.Dev, id.Ino), replayPages(recs[1], id.Dev, id.Ino)
	lo, hi := pageSet(after), pageSet(before)
	t.Logf("page-cache records of the file: %d runs, %d folios (%.1f×); %d pages resident at the end (mincore: %d before the cut, %d after)",
		pr.records, pf.records, float64(pf.records)/float64(max(pr.records, 1)), len(pr.resident), len(hi), len(lo))
	if pr.order != 0 || pf.order != 0 {
		t.Errorf("pages added while resident or deleted while not: %d in the runs, %d in the folios", pr.order, pf.order)
	}
	for _, c := range []struct {
		name string
		pt   pageTrack
	}{{"runs", pr}, {"folios", pf}} {
		if missing, extra := between(c.pt.resident, lo, hi); missing+extra != 0 {
			t.Errorf("resident at the end, by the %s: %d pages, of which %d mincore did not find before the cut; %d it found after the cut are not (mincore: %d before, %d after)",
				c.name, len(c.pt.resident), extra, missing, len(hi), len(lo))
		}
	}
	if pr.records*10 > pf.records {
		t.Errorf("%d runs for %d folios: fewer than 10 folios a run on a sequential read", pr.records, pf.records)
	}

	rr, rf := attribute(t, meta, recs[0]), attribute(t, meta, recs[1])
	var sum event.Counters
	for _, a := range rf.Aggs {
		sum.Add(&a.Counters)
	}
	t.Logf("per folio: %d pages added, %d evicted, %d trigger bytes, %d major faults", sum.PagesAdded, sum.PagesEvicted, sum.TriggerBytes, sum.Major)
	if sum.PagesEvicted == 0 || sum.TriggerBytes == 0 || sum.PagesAdded <= pages {
		t.Fatalf("the workload did not read ahead, evict and re-read: %+v", sum)
	}
	if a, b := rr.Aggs, rf.Aggs; !slices.Equal(a, b) {
		t.Errorf("aggregates differ:\n%s", aggDiff(a, b))
	}
	if a, b := rr.Tokens, rf.Tokens; !slices.Equal(a, b) {
		t.Errorf("per-token sums differ:\nruns   %+v\nfolios %+v", a, b)
	}
}

// pageSet is the pages of mincore's ranges.
func pageSet(ranges [][2]int64) map[int64]bool {
	set := map[int64]bool{}
	for _, r := range ranges {
		for p := r[0]; p < r[1]; p++ {
			set[p] = true
		}
	}
	return set
}

// between counts the pages of lo (resident after the cut) that a replay
// lacks, and those it has that hi (resident before the cut) lacks.
func between(replay map[int64]int, lo, hi map[int64]bool) (missing, extra int) {
	for p := range lo {
		if replay[p] != 1 {
			missing++
		}
	}
	for p := range replay {
		if !hi[p] {
			extra++
		}
	}
	return missing, extra
}

func aggDiff(a, b []event.Agg) string {
	key := func(x event.Agg) event.AggKey { return x.AggKey }
	var out []string
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || i < len(a) && cmpKey(key(a[i]), key(b[j])) < 0:
			out = append(out, fmt.Sprintf("runs only   %+v", a[i]))
			i++
		case i == len(a) || cmpKey(key(a[i]), key(b[j])) > 0:
			out = append(out, fmt.Sprintf("folios only %+v", b[j]))
			j++
		default:
			if a[i] != b[j] {
				out = append(out, fmt.Sprintf("runs   %+v\nfolios %+v", a[i], b[j]))
			}
			i++
			j++
		}
		if len(out) > 20 {
			break
		}
	}
	return strings.Join(out, "\n")
}

func cmpKey(a, b event.AggKey) int {
	return cmp.Or(cmp.Compare(a.Token, b.Token), cmp.Compare(a.Tensor, b.Tensor), cmp.Compare(a.Expert, b.Expert), cmp.Compare(a.Op, b.Op))
}
