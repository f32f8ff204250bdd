package correlate

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/wire"
)

func runMeta(t *testing.T, meta *rundir.Meta, recs ...[]byte) (*Result, []event.Event) {
	t.Helper()
	sink := &collect{}
	c, err := New(meta, sink)
	if err != nil {
		t.Fatal(err)
	}
	return feed(t, c, sink, recs...)
}

func feed(t *testing.T, c *Correlator, sink *collect, recs ...[]byte) (*Result, []event.Event) {
	t.Helper()
	var st ingest.DecodeStats
	for _, b := range recs {
		r, ok := ingest.Decode(b, &st)
		if !ok {
			t.Fatalf("record did not decode: %+v", st)
		}
		if err := c.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	res, err := c.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return res, sink.evs
}

func TestUnaccountedFaultsAreKeptApartFromCompletedOnes(t *testing.T) {
	res, evs := run(t,
		fault(200, 100, 7, modelIno, 4096, uint8(wire.FaultClassFAULT_UNACCOUNTED)),
		fault(400, 300, 7, modelIno, 4096, uint8(wire.FaultClassFAULT_MINOR)),
	)
	q := aggOf(res, idQ, -1)
	if q.Faults != 1 || q.Minor != 1 || q.Major != 0 || q.Unaccounted != 1 || q.StallNS != 100 {
		t.Errorf("attn_q %+v, want 1 minor fault of 100 ns and 1 unaccounted apart", q)
	}
	if tok := res.Tokens[0]; tok.Faults != tok.Major+tok.Minor || tok.Unaccounted != 1 {
		t.Errorf("token %+v: faults must be major + minor, unaccounted apart", tok.Counters)
	}
	if len(evs) != 2 || evs[0].Class != 2 || evs[0].Dur != 0 {
		t.Errorf("events %+v, want the unaccounted one kept with no stall", evs)
	}
}

func mmapRec(ts uint64, tgid uint32, start, end, pgoff, ino uint64) []byte {
	h := hdr(wire.EventTypeEV_MMAP, ts, tgid, 0)
	h.Tgid = tgid
	return ingest.Bytes(&wire.MmapEvent{Hdr: h, Start: start, End: end, Pgoff: pgoff, Ino: ino, Dev: modelDev})
}

// kernelFault is a fault the kernel did not resolve: no start, no file.
func kernelFault(ts uint64, tgid uint32, addr uint64) []byte {
	h := hdr(wire.EventTypeEV_FAULT, ts, tgid, 1)
	h.Tgid = tgid
	return ingest.Bytes(&wire.FaultEvent{Hdr: h, Addr: addr, Class: 1})
}

// writeSnapshot writes maps as process 50's snapshot in run dir dir.
func writeSnapshot(t *testing.T, dir, maps string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "maps"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "maps", "0001-50.txt"), []byte(maps), 0o644); err != nil {
		t.Fatal(err)
	}
}

// snapshotted is a correlator of the test model whose run dir dir holds
// process 50's snapshot taken at 10 (writeSnapshot), loaded.
func snapshotted(t *testing.T, dir string) (*Correlator, *collect) {
	t.Helper()
	meta := testMeta()
	meta.Maps = []rundir.MapsSnapshot{{MonoNS: 10, PID: 50, File: "maps/0001-50.txt"}}
	sink := &collect{}
	c, err := New(meta, sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.LoadMaps(dir); err != nil {
		t.Fatal(err)
	}
	return c, sink
}

func TestFaultsTheKernelDidNotResolveAreLookedUpInTheMappings(t *testing.T) {
	const base = 0x7f0000000000
	dir := t.TempDir()
	// The snapshot knows the executable (mapped before tracing began) and
	// an anonymous region; the stream knows the model mapping.
	maps := strings.Join([]string{
		"00400000-00500000 r-xp 00000000 fe:00 4242                       /usr/bin/node",
		"7e0000000000-7e0000100000 rw-p 00000000 00:00 0 ",
	}, "\n") + "\n"
	writeSnapshot(t, dir, maps)
	tests := []struct {
		name   string
		rec    []byte
		tensor uint32
		expert int16
		offset int64
		byMaps uint64
	}{
		// The model is mapped from file page 1 on: base+12288 is file byte 16384.
		{"unresolved fault in the streamed model mapping", kernelFault(500, 50, base+12288), idExps, 0, 4096, 1},
		{"unresolved fault before the mapping existed", kernelFault(50, 50, base+12288), event.TensorAnon, -1, base + 12288, 0},
		{"unresolved fault in the executable of the snapshot", kernelFault(500, 50, 0x401000), event.TensorOther, -1, 0x1000, 1},
		{"unresolved fault in an anonymous region of the snapshot", kernelFault(500, 50, 0x7e0000000010), event.TensorAnon, -1, 0x7e0000000010, 0},
		{"unresolved fault of another process", kernelFault(500, 51, base+12288), event.TensorAnon, -1, base + 12288, 0},
		{"resolved anonymous fault is not second-guessed", func() []byte {
			h := hdr(wire.EventTypeEV_FAULT, 500, 50, 1)
			h.Tgid = 50
			return ingest.Bytes(&wire.FaultEvent{Hdr: h, StartTs: 450, Addr: base + 12288, Class: 1})
		}(), event.TensorAnon, -1, base + 12288, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, sink := snapshotted(t, dir)
			res, evs := feed(t, c, sink, mmapRec(100, 50, base, base+65536, 1, modelIno), tc.rec)
			if len(evs) != 1 {
				t.Fatalf("got %d events, want 1", len(evs))
			}
			e := evs[0]
			if e.Tensor != tc.tensor || e.Expert != tc.expert || e.Offset != tc.offset {
				t.Errorf("got tensor %d expert %d offset %#x, want %d %d %#x", e.Tensor, e.Expert, e.Offset, tc.tensor, tc.expert, tc.offset)
			}
			if res.Stats.FaultsByMaps != tc.byMaps {
				t.Errorf("%d faults resolved by the mappings, want %d", res.Stats.FaultsByMaps, tc.byMaps)
			}
		})
	}
}

func TestMappingsOverlaidLaterReplaceThePartTheyCover(t *testing.T) {
	var a addrSpace
	a.insert(mapping{start: 0x1000, end: 0x9000, off: 0, ino: 1, ts: 1})
	a.insert(mapping{start: 0x3000, end: 0x5000, off: 0x10000, ino: 2, ts: 2})
	tests := []struct {
		addr uint64
		ino  uint64
		off  uint64 // file offset of addr
	}{{0x1000, 1, 0}, {0x2fff, 1, 0x1fff}, {0x3000, 2, 0x10000}, {0x4fff, 2, 0x11fff}, {0x5000, 1, 0x4000}, {0x8fff, 1, 0x7fff}, {0x9000, 0, 0}}
	for _, tc := range tests {
		m := a.find(tc.addr)
		switch {
		case m == nil && tc.ino == 0:
		case m == nil || m.ino != tc.ino || m.off+(tc.addr-m.start) != tc.off:
			t.Errorf("address %#x: got %+v, want ino %d at file offset %#x", tc.addr, m, tc.ino, tc.off)
		}
	}
}

// munmapRec is tgid's munmap of [start, end) at ts.
func munmapRec(ts uint64, tgid uint32, start, end uint64) []byte {
	h := hdr(wire.EventTypeEV_MUNMAP, ts, tgid, 0)
	h.Tgid = tgid
	return ingest.Bytes(&wire.MunmapEvent{Hdr: h, Start: start, End: end})
}

// A range the process unmapped is no longer the file's from the call on,
// though a snapshot taken before still shows it mapped: anonymous memory
// may reuse it (llama.cpp unmaps what of a model went to a GPU, and a
// compute buffer may land there), and a fault there the kernel did not
// resolve is anonymous, not the model's. What stays mapped, what came
// before the call and a mapping made there again are the file's.
func TestAnUnmappedRangeIsNoLongerTheFilesThoughASnapshotShowedIt(t *testing.T) {
	const base = 0x7f0000000000
	dir := t.TempDir()
	// The model mapped from file page 1 on, as the snapshot at 10 saw it.
	maps := fmt.Sprintf("7f0000000000-7f0000010000 r--s 00001000 01:01 %d   /models/m.gguf\n", modelIno)
	writeSnapshot(t, dir, maps)
	unmap := munmapRec(300, 50, base+16384, base+32768)
	tests := []struct {
		name string
		recs [][]byte
		anon bool
	}{
		{"a fault in the unmapped range after the call: anonymous", [][]byte{unmap, kernelFault(500, 50, base+20480)}, true},
		{"a fault in the unmapped range before the call: the file's", [][]byte{kernelFault(200, 50, base+20480), unmap}, false},
		{"a fault beside the unmapped range: the file's", [][]byte{unmap, kernelFault(500, 50, base+12288)}, false},
		{"a fault where the file was mapped again after: the file's", [][]byte{unmap, mmapRec(400, 50, base+16384, base+32768, 5, modelIno), kernelFault(500, 50, base+20480)}, false},
		{"another process's unmap: the file's", [][]byte{munmapRec(300, 51, base+16384, base+32768), kernelFault(500, 50, base+20480)}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, sink := snapshotted(t, dir)
			_, evs := feed(t, c, sink, tc.recs...)
			if len(evs) != 1 {
				t.Fatalf("got %d events, want 1", len(evs))
			}
			if anon := evs[0].Tensor == event.TensorAnon; anon != tc.anon {
				t.Errorf("tensor %d: anonymous %v, want %v", evs[0].Tensor, anon, tc.anon)
			}
		})
	}
}

func TestSnapshotDevicesAreTheKernelsEncodingAndBadSnapshotsAreErrors(t *testing.T) {
	v := newVMTracker()
	if err := v.addSnapshot(7, 10, strings.NewReader("7f12a0000000-7f12a8000000 r--s 00001000 fd:01 5316814   /work/my model.gguf\n")); err != nil {
		t.Fatal(err)
	}
	m := v.resolve(7, 0x7f12a0000010, 20)
	if m == nil || m.start != 0x7f12a0000000 || m.end != 0x7f12a8000000 || m.off != 0x1000 || m.ino != 5316814 || m.dev != 0xfd<<20|1 {
		t.Errorf("resolved %+v", m)
	}
	for _, bad := range []string{"garbage\n", "zz-10 r--p 0 fd:01 1\n", "1000-2000 r--p 0 fd01 1\n"} {
		if err := newVMTracker().addSnapshot(7, 10, strings.NewReader(bad)); err == nil {
			t.Errorf("snapshot %q read without an error", bad)
		}
	}
}

func TestBlockRequestSpanningTwoModelsOnOneDiskIsSplitBetweenThem(t *testing.T) {
	meta := testMeta()
	second := meta.Models[0]
	second.Path, second.Ino = "b.gguf", modelIno+1
	second.Tensors = []rundir.Tensor{{Name: "b.weight", Offset: 0, Size: 65536, Layer: -1, Role: "b"}}
	// Model b's first 8192 bytes follow model a's second extent on disk.
	second.Extents = []rundir.Extent{{Logical: 0, Physical: physBase + 16384 + 4096 + 49152, Length: 65536}}
	meta.Models = append(meta.Models, second)
	idB := event.FirstTensor + 3
	// Request: the last 4096 bytes of model a's output.weight... a's file
	// [61440, 65536) is at partition physBase+20480+45056.
	res, _ := runMeta(t, meta, block(100, physBase+20480+45056, 12288, 0))
	// The request counts once, where its first byte lies: in model a.
	if a := aggOf(res, event.TensorModelMeta, -1); a.ReadBytes != 4096 || a.BlockReqs != 1 {
		t.Errorf("model a's tail (past its last tensor) %+v, want 4096 bytes read and the request", a)
	}
	if b := aggOf(res, idB, -1); b.ReadBytes != 8192 || b.BlockReqs != 0 {
		t.Errorf("model b %+v, want 8192 bytes read and no request (it began in model a)", b)
	}
	if o := aggOf(res, event.TensorOther, -1); o.ReadBytes != 0 {
		t.Errorf("other read %d, want 0: every byte is in one of the models", o.ReadBytes)
	}
}

func TestExtentsWithoutAPhysicalLocationAreIgnored(t *testing.T) {
	meta := testMeta()
	meta.Models[0].Extents[0].Flags = 0x2 // FIEMAP_EXTENT_UNKNOWN
	res, _ := runMeta(t, meta, block(100, physBase, 4096, 0))
	if o := aggOf(res, event.TensorOther, -1); o.ReadBytes != 4096 {
		t.Errorf("other read %d, want the request: its extent has no known location", o.ReadBytes)
	}
}

func TestBlockCompletionOnTheFaultingThreadKeepsItsReadaheadWindow(t *testing.T) {
	b := wire.BlockEvent{Hdr: hdr(wire.EventTypeEV_BLOCK, 170, 7, 1), IssueTs: 120,
		Sector: (partStart*512 + physBase) / 512, Dev: diskDev, Bytes: 4096}
	_, evs := run(t,
		page(wire.EventTypeEV_PAGE_ADD, 150, 7, modelIno, 3, 0),
		ingest.Bytes(&b),
		fault(200, 100, 7, modelIno, 4096, 1),
	)
	for _, e := range evs {
		if e.Kind == event.KindPageAdd && e.Trigger != idQ {
			t.Errorf("add %+v lost its trigger to a block completion on the same thread", e)
		}
	}
}

// straddleMeta has tensors that do not start on page boundaries, as GGUF
// aligns tensors to 32 bytes only.
func straddleMeta() *rundir.Meta {
	return &rundir.Meta{Models: []rundir.ModelFile{{
		Path: "s.gguf", Dev: modelDev, Ino: modelIno, Size: 32768,
		Tensors: []rundir.Tensor{
			{Name: "a", Offset: 1000, Size: 5000, Layer: 0},  // [1000, 6000)
			{Name: "b", Offset: 6016, Size: 10000, Layer: 0}, // [6016, 16016)
			{Name: "c", Offset: 16032, Size: 16736, Layer: 1, Experts: 2, ExpertStride: 8368},
		},
	}}}
}

func TestPagesAreCountedOnceWhereTheyStartAndBytesWhereTheyLie(t *testing.T) {
	// One folio of 8 pages: bytes [0, 32768).
	res, _ := runMeta(t, straddleMeta(), page(wire.EventTypeEV_PAGE_ADD, 10, 9, modelIno, 0, 3))
	a, b, c0, c1, hd := aggOf(res, event.FirstTensor, -1), aggOf(res, event.FirstTensor+1, -1), aggOf(res, event.FirstTensor+2, 0),
		aggOf(res, event.FirstTensor+2, 1), aggOf(res, event.TensorModelMeta, -1)
	// Pages start at 0 (header), 4096 (a), 8192, 12288 (b), 16384, 20480
	// (c expert 0: [16032, 24400)), 24576, 28672 (c expert 1).
	for _, tc := range []struct {
		name         string
		got          event.Counters
		pages, bytes uint64
	}{{"header", hd, 1, 1000 + 16 + 16}, {"a", a, 1, 5000}, {"b", b, 2, 10000}, {"c expert 0", c0, 2, 8368}, {"c expert 1", c1, 2, 8368}} {
		if tc.got.PagesAdded != tc.pages || tc.got.AddedBytes != tc.bytes {
			t.Errorf("%s: %d pages %d bytes, want %d and %d", tc.name, tc.got.PagesAdded, tc.got.AddedBytes, tc.pages, tc.bytes)
		}
	}
	if tok := res.Tokens[0]; tok.PagesAdded != 8 || tok.AddedBytes != 32768 {
		t.Errorf("token %d pages %d bytes, want 8 and 32768", tok.PagesAdded, tok.AddedBytes)
	}
}

func TestExpertSelectionsOfOneLayerCountOnceWhateverNodesReportThem(t *testing.T) {
	ev := func(name string, ids ...int32) []byte {
		e := wire.ExpertsEvent{Hdr: hdr(wire.EventTypeEV_EXPERTS, 5, 7, 3), N_used: 2, N_tokens: 1, Count: uint32(len(ids))}
		copy(e.Ids[:], ids)
		for i, c := range name {
			e.Name[i] = int8(c)
		}
		return ingest.Bytes(&e)
	}
	res, _ := run(t, ev("ffn_moe_topk-2", 1, 3), ev("ffn_moe_weights-2", 1, 3), ev("ffn_moe_topk-2", 4, 5), ev("ffn_moe_weights-4", 6, 7))
	got := map[string]uint64{}
	for _, s := range res.Experts {
		got[fmt.Sprintf("L%d/e%d", s.Layer, s.Expert)] = s.Count
	}
	want := map[string]uint64{"L2/e1": 1, "L2/e3": 1, "L2/e4": 1, "L2/e5": 1, "L4/e6": 1, "L4/e7": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("selections %v, want %v", got, want)
	}
}

// Whatever the records say, the correlator does not panic, and every
// counter charged to tokens is charged, in total, to tensors: the
// aggregates are a partition of the run.
func TestRandomRecordsKeepTokenAndTensorTotalsEqual(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	pick := func(xs ...uint64) uint64 { return xs[rng.IntN(len(xs))] }
	var recs [][]byte
	for i := range 20000 {
		h := wire.EventHdr{Ts: uint64(i) * 100, Tid: uint32(rng.IntN(4)), Tgid: 50, Token: uint32(rng.IntN(5)),
			Phase: uint8(rng.IntN(3)), Op: uint32(rng.IntN(3))}
		ino := pick(modelIno, 0, 555)
		off := pick(0, 4095, 4096, 12287, 20480, 45056, 65536, uint64(rng.Int64N(1<<20)), 1<<63)
		switch rng.IntN(7) {
		case 0:
			h.Type = uint16(wire.EventTypeEV_FAULT)
			recs = append(recs, ingest.Bytes(&wire.FaultEvent{Hdr: h, StartTs: pick(0, h.Ts-50, h.Ts+50), Ino: ino, Dev: modelDev,
				FileOff: off, Addr: pick(0, 0x7f0000001000, 1<<63), Class: uint8(rng.IntN(4))}))
		case 1, 2:
			h.Type = uint16(pick(uint64(wire.EventTypeEV_PAGE_ADD), uint64(wire.EventTypeEV_PAGE_DEL)))
			recs = append(recs, ingest.Bytes(&wire.PageEvent{Hdr: h, Ino: ino, Dev: modelDev, Index: off / 4096, Order: uint32(pick(0, 2, 9, 40))}))
		case 3:
			h.Type = uint16(wire.EventTypeEV_BLOCK)
			recs = append(recs, ingest.Bytes(&wire.BlockEvent{Hdr: h, IssueTs: pick(0, h.Ts-10, h.Ts+10),
				Sector: pick(0, (partStart*512+physBase)/512, (partStart*512+physBase+12288)/512, 1<<60), Dev: uint32(pick(diskDev, 3)),
				Bytes: uint32(pick(0, 512, 4096, 1<<20, 1<<31)), CmdFlags: uint32(pick(0, 1, 3))}))
		case 4:
			h.Type = uint16(wire.EventTypeEV_MMAP)
			recs = append(recs, ingest.Bytes(&wire.MmapEvent{Hdr: h, Start: 0x7f0000000000, End: 0x7f0000000000 + pick(0, 1<<20, 1<<40),
				Pgoff: pick(0, 3, 1<<50), Ino: ino, Dev: modelDev}))
		case 5:
			h.Type = uint16(wire.EventTypeEV_OP)
			recs = append(recs, ingest.Bytes(&wire.OpEvent{Hdr: h, Op: uint32(pick(0, 2, 1<<31))}))
		case 6:
			h.Type = uint16(pick(uint64(wire.EventTypeEV_DECODE_BEGIN), uint64(wire.EventTypeEV_DECODE_END)))
			recs = append(recs, ingest.Bytes(&wire.DecodeEvent{Hdr: h, BeginTs: pick(0, h.Ts), N_tokens: int32(rng.IntN(3) - 1)}))
		}
	}
	res, evs := run(t, recs...)
	var byTok, byAgg event.Counters
	for _, tk := range res.Tokens {
		byTok.Add(&tk.Counters)
	}
	for _, a := range res.Aggs {
		byAgg.Add(&a.Counters)
	}
	if byTok != byAgg {
		t.Errorf("tokens sum to %+v\ntensors sum to %+v", byTok, byAgg)
	}
	var added uint64
	for _, e := range evs {
		if e.Kind == event.KindPageAdd {
			added += e.Bytes
		}
	}
	if added != byTok.AddedBytes || byTok.Faults != byTok.Major+byTok.Minor {
		t.Errorf("events add %d bytes, tokens %d; faults %d = %d major + %d minor?", added, byTok.AddedBytes, byTok.Faults, byTok.Major, byTok.Minor)
	}
}

// TestAnAddressTheKernelCouldNotLookUpIsResolvedInTheMappings: where
// bpf_find_vma found the mmap lock held (another thread was mapping
// memory), a fault, a graph node's weight and a loader's copy come with
// vma_busy and no file; each is resolved from the mappings user space
// knows, as a kernel without bpf_find_vma has them resolved, and is
// neither anonymous nor "not file-backed" for want of a lookup.
func TestAnAddressTheKernelCouldNotLookUpIsResolvedInTheMappings(t *testing.T) {
	const base, elsewhere = 0x7f0000000000, 0x7e0000000000
	busyFault := func(addr uint64) []byte {
		return ingest.Bytes(&wire.FaultEvent{Hdr: hdr(wire.EventTypeEV_FAULT, 500, 7, 1), StartTs: 450, Addr: addr, Class: 1, VmaBusy: 1})
	}
	busyNode := func(data uint64) []byte {
		n := wire.NodeEvent{Hdr: hdr(wire.EventTypeEV_NODE, 500, 1, 1), Op: 2, WeightData: data, VmaBusy: 1}
		cstr(n.NodeName[:], "Qcur-0")
		cstr(n.WeightName[:], "blk.0.attn_q.weight")
		return ingest.Bytes(&n)
	}
	busyPlace := func(data uint64) []byte {
		e := wire.PlaceEvent{Hdr: hdr(wire.EventTypeEV_PLACE, 500, 1, 0), Buffer: 0xa, Data: data, VmaBusy: 1}
		cstr(e.Name[:], "blk.0.attn_q.weight")
		return ingest.Bytes(&e)
	}
	tests := []struct {
		name  string
		rec   []byte
		check func(res *Result, evs []event.Event) string
	}{
		// The model is mapped from file page 1 on: base+12288 is file byte 16384.
		{"a fault in the model's mapping is charged to its slice", busyFault(base + 12288), func(res *Result, evs []event.Event) string {
			if e := evs[0]; e.Tensor != idExps || e.Expert != 0 || e.Offset != 4096 || res.Stats.FaultsByMaps != 1 {
				return fmt.Sprintf("tensor %d expert %d offset %d, %d by the mappings", e.Tensor, e.Expert, e.Offset, res.Stats.FaultsByMaps)
			}
			return ""
		}},
		{"a fault where no file is known is anonymous", busyFault(elsewhere), func(res *Result, evs []event.Event) string {
			if e := evs[0]; e.Tensor != event.TensorAnon {
				return fmt.Sprintf("tensor %d", e.Tensor)
			}
			return ""
		}},
		{"a node's weight in the model's mapping is file-backed", busyNode(base + 12288), func(res *Result, _ []event.Event) string {
			if q := res.Tensors[idQ]; q.NotFileBacked {
				return "not file-backed"
			}
			return ""
		}},
		{"a node's weight where no file is known is not file-backed", busyNode(elsewhere), func(res *Result, _ []event.Event) string {
			if q := res.Tensors[idQ]; !q.NotFileBacked {
				return "file-backed"
			}
			return ""
		}},
		{"a copy from the model's mapping is a copy", busyPlace(base + 12288), func(res *Result, _ []event.Event) string {
			if q := res.Tensors[idQ]; !q.Copied || q.Device != "Vulkan0" {
				return fmt.Sprintf("copied %v to %q", q.Copied, q.Device)
			}
			return ""
		}},
		{"a copy from where no file is known is none", busyPlace(elsewhere), func(res *Result, _ []event.Event) string {
			if q := res.Tensors[idQ]; q.Copied {
				return "copied"
			}
			return ""
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, evs := run(t, bufName(1, 0xa, "Vulkan0"), mmapRec(100, 1, base, base+65536, 1, modelIno), tc.rec)
			if msg := tc.check(res, evs); msg != "" {
				t.Error(msg)
			}
		})
	}
}
