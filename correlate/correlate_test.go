package correlate

import (
	"slices"
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/wire"
)

const (
	modelDev  = 1<<20 | 1
	modelIno  = 100
	diskDev   = 8 << 20
	partStart = 2048            // sectors
	physBase  = uint64(1 << 20) // partition byte of extent 1
)

// testMeta is one model:
//
//	[0, 4096)       header
//	[4096, 12288)   blk.0.attn_q.weight
//	[12288, 45056)  blk.0.ffn_up_exps.weight, 4 experts of 8192
//	[45056, 49152)  padding
//	[49152, 53248)  output.weight
//
// whose extents put file [0, 16384) at partition byte physBase and file
// [16384, 65536) 4096 bytes after where the first extent ends.
func testMeta() *rundir.Meta {
	return &rundir.Meta{
		OpNames: []string{"NONE", "GET_ROWS", "MUL_MAT"},
		Models: []rundir.ModelFile{{
			Path: "m.gguf", Dev: modelDev, Ino: modelIno, Size: 65536,
			Tensors: []rundir.Tensor{
				{Name: "blk.0.attn_q.weight", Offset: 4096, Size: 8192, Layer: 0, Role: "attn_q"},
				{Name: "blk.0.ffn_up_exps.weight", Offset: 12288, Size: 32768, Layer: 0, Role: "ffn_up_exps", Experts: 4, ExpertStride: 8192},
				{Name: "output.weight", Offset: 49152, Size: 4096, Layer: -1, Role: "output"},
			},
			Block: rundir.BlockDevice{DiskDev: diskDev, PartStartSector: partStart},
			Extents: []rundir.Extent{
				{Logical: 0, Physical: physBase, Length: 16384},
				{Logical: 16384, Physical: physBase + 16384 + 4096, Length: 49152},
			},
		}},
	}
}

const (
	idQ    = event.FirstTensor
	idExps = event.FirstTensor + 1
	idOut  = event.FirstTensor + 2
)

type collect struct{ evs []event.Event }

func (c *collect) Event(e *event.Event) error { c.evs = append(c.evs, *e); return nil }

func hdr(t wire.EventType, ts uint64, tid, token uint32) wire.EventHdr {
	return wire.EventHdr{Ts: ts, Tgid: 1, Tid: tid, Token: token, Type: uint16(t), Phase: 2}
}

func fault(ts, start uint64, tid uint32, ino, off uint64, class uint8) []byte {
	return ingest.Bytes(&wire.FaultEvent{Hdr: hdr(wire.EventTypeEV_FAULT, ts, tid, 1), StartTs: start, Ino: ino, FileOff: off, Dev: modelDev, Class: class, Addr: 0x7000})
}

func page(t wire.EventType, ts uint64, tid uint32, ino, index uint64, order uint32) []byte {
	return ingest.Bytes(&wire.PageEvent{Hdr: hdr(t, ts, tid, 1), Ino: ino, Index: index, Dev: modelDev, Order: order})
}

func block(ts uint64, partByte uint64, n uint32, op uint32) []byte {
	return ingest.Bytes(&wire.BlockEvent{Hdr: hdr(wire.EventTypeEV_BLOCK, ts, 0, 1), IssueTs: ts - 10,
		Sector: (partStart*512 + partByte) / 512, Dev: diskDev, Bytes: n, CmdFlags: op})
}

func node(name string, ino uint64, op uint32) []byte {
	n := wire.NodeEvent{Hdr: hdr(wire.EventTypeEV_NODE, 1, 1, 1), Ino: ino, Dev: modelDev, Op: op}
	cstr(n.WeightName[:], name)
	return ingest.Bytes(&n)
}

func run(t *testing.T, recs ...[]byte) (*Result, []event.Event) {
	t.Helper()
	sink := &collect{}
	c, err := New(testMeta(), sink)
	if err != nil {
		t.Fatal(err)
	}
	return feed(t, c, sink, recs...)
}

func aggOf(res *Result, tensor uint32, expert int16) event.Counters {
	var c event.Counters
	for _, a := range res.Aggs {
		if a.Tensor == tensor && a.Expert == expert {
			c.Add(&a.Counters)
		}
	}
	return c
}

func TestFaultAttributionAtTensorAndExpertBoundaries(t *testing.T) {
	tests := []struct {
		name   string
		ino    uint64
		off    uint64
		tensor uint32
		expert int16
		within int64
	}{
		{"last byte of header", modelIno, 4095, event.TensorModelMeta, -1, 4095},
		{"first byte of attn_q", modelIno, 4096, idQ, -1, 0},
		{"last byte of attn_q", modelIno, 12287, idQ, -1, 8191},
		{"first byte of expert 0", modelIno, 12288, idExps, 0, 0},
		{"last byte of expert 0", modelIno, 20479, idExps, 0, 8191},
		{"first byte of expert 1", modelIno, 20480, idExps, 1, 8192},
		{"last byte of expert 3", modelIno, 45055, idExps, 3, 32767},
		{"padding after the experts", modelIno, 45056, event.TensorModelMeta, -1, 45056},
		{"output", modelIno, 49152, idOut, -1, 0},
		{"past the last tensor", modelIno, 60000, event.TensorModelMeta, -1, 60000},
		{"another file", 555, 4096, event.TensorOther, -1, 4096},
		{"anonymous memory", 0, 0, event.TensorAnon, -1, 0x7000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, evs := run(t, fault(200, 150, 7, tc.ino, tc.off, 1))
			if len(evs) != 1 {
				t.Fatalf("got %d events, want 1", len(evs))
			}
			e := evs[0]
			if e.Tensor != tc.tensor || e.Expert != tc.expert || e.Offset != tc.within {
				t.Errorf("got tensor %d expert %d offset %d, want %d %d %d", e.Tensor, e.Expert, e.Offset, tc.tensor, tc.expert, tc.within)
			}
			if e.Dur != 50 || e.Kind != event.KindFault {
				t.Errorf("stall %d kind %v, want 50 fault", e.Dur, e.Kind)
			}
			a := aggOf(res, tc.tensor, tc.expert)
			if a.Faults != 1 || a.Major != 1 || a.StallNS != 50 {
				t.Errorf("aggregate %+v, want one major fault of 50 ns", a)
			}
		})
	}
}

func TestFolioStraddlingTwoTensorsSplitsItsBytes(t *testing.T) {
	// Pages 2-3 are bytes [8192, 16384): 4096 of attn_q, 4096 of expert 0.
	res, evs := run(t, page(wire.EventTypeEV_PAGE_ADD, 10, 9, modelIno, 2, 1),
		page(wire.EventTypeEV_PAGE_DEL, 20, 9, modelIno, 2, 1))
	if len(evs) != 4 {
		t.Fatalf("got %d events, want 2 adds and 2 deletes: %+v", len(evs), evs)
	}
	if q := aggOf(res, idQ, -1); q.AddedBytes != 4096 || q.EvictedBytes != 4096 {
		t.Errorf("attn_q %+v, want 4096 added and evicted", q)
	}
	if x := aggOf(res, idExps, 0); x.AddedBytes != 4096 || x.EvictedBytes != 4096 {
		t.Errorf("expert 0 %+v, want 4096 added and evicted", x)
	}
	tok := res.Tokens[0]
	if tok.PagesAdded != 2 || tok.PagesEvicted != 2 || tok.AddedBytes != 8192 {
		t.Errorf("token %+v, want whole folio of 2 pages", tok)
	}
	if tok.TensorsTouched != 2 || tok.ExpertsTouched != 1 {
		t.Errorf("touched %d tensors %d experts, want 2 and 1", tok.TensorsTouched, tok.ExpertsTouched)
	}
}

func TestFolioOfAnotherFileIsKeptAsOtherFile(t *testing.T) {
	res, _ := run(t, page(wire.EventTypeEV_PAGE_ADD, 10, 9, 555, 0, 2))
	if o := aggOf(res, event.TensorOther, -1); o.AddedBytes != 16384 {
		t.Errorf("other file %+v, want 16384 added", o)
	}
}

func TestBlockRequestAcrossTwoExtentsWithPartitionOffset(t *testing.T) {
	// Partition bytes [physBase+12288, physBase+24576): file [12288, 16384)
	// in extent 1, a 4096-byte hole, then file [16384, 20480) in extent 2.
	res, evs := run(t, block(100, physBase+12288, 12288, 0))
	if len(evs) != 3 {
		t.Fatalf("got %d events, want 3 slices: %+v", len(evs), evs)
	}
	x := aggOf(res, idExps, 0)
	if x.ReadBytes != 8192 || x.BlockReqs != 1 {
		t.Errorf("expert 0 %+v, want 8192 bytes read in one request", x)
	}
	if o := aggOf(res, event.TensorOther, -1); o.ReadBytes != 4096 {
		t.Errorf("other %+v, want the 4096 bytes of the hole", o)
	}
	// The device bytes in no extent come last, at their disk byte.
	if evs[0].Offset != 0 || evs[1].Offset != 4096 || evs[2].Tensor != event.TensorOther {
		t.Errorf("slices %+v, want expert 0 at 0 and 4096, then other", evs)
	}
	if tok := res.Tokens[0]; tok.ReadBytes != 12288 || tok.BlockReqs != 1 {
		t.Errorf("token %+v, want the whole request", tok)
	}
}

// A block request is one request wherever its bytes land: it counts where
// its first byte lies, so that the requests of any grouping of the
// aggregates (by token, tensor, layer, expert) add up to the disk's.
func TestABlockRequestCountsOnceWhereItsFirstByteLies(t *testing.T) {
	type at struct {
		tensor uint32
		expert int16
	}
	tests := []struct {
		name       string
		disk       uint64 // partition byte
		n          uint32
		counted    at
		notCounted []at // read from, but not counted in
	}{
		{"from a tensor's tail into an expert slice", physBase + 8192, 12288,
			at{idQ, -1}, []at{{idExps, 0}, {event.TensorOther, -1}}},
		{"across two expert slices of one tensor", physBase + 20480 + 4096, 16384,
			at{idExps, 1}, []at{{idExps, 2}}},
		{"from a disk gap into the model", physBase + 16384, 8192,
			at{event.TensorOther, -1}, []at{{idExps, 0}}},
		{"of no bytes", physBase, 0,
			at{event.TensorOther, -1}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, _ := run(t, block(100, tc.disk, tc.n, 0))
			if c := aggOf(res, tc.counted.tensor, tc.counted.expert); c.BlockReqs != 1 {
				t.Errorf("tensor %d expert %d %+v, want the request", tc.counted.tensor, tc.counted.expert, c)
			}
			for _, o := range tc.notCounted {
				if c := aggOf(res, o.tensor, o.expert); c.ReadBytes == 0 || c.BlockReqs != 0 {
					t.Errorf("tensor %d expert %d %+v, want bytes read and no request", o.tensor, o.expert, c)
				}
			}
			var sum uint64
			for _, a := range res.Aggs {
				sum += a.BlockReqs
			}
			if tok := res.Tokens[0]; tok.BlockReqs != 1 || sum != 1 {
				t.Errorf("token counts %d requests, its aggregates %d: want 1 and 1", tok.BlockReqs, sum)
			}
		})
	}
}

func TestBlockRequestsNotOfModelFiles(t *testing.T) {
	tests := []struct {
		name  string
		rec   []byte
		read  uint64
		other uint64
	}{
		{"another disk", ingest.Bytes(&wire.BlockEvent{Hdr: hdr(wire.EventTypeEV_BLOCK, 5, 0, 1), Sector: 8, Dev: 99, Bytes: 4096}), 4096, 4096},
		{"before the partition", ingest.Bytes(&wire.BlockEvent{Hdr: hdr(wire.EventTypeEV_BLOCK, 5, 0, 1), Sector: 8, Dev: diskDev, Bytes: 4096}), 4096, 4096},
		{"write to the model's extent", block(5, physBase+4096, 4096, 1), 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, evs := run(t, tc.rec)
			if len(evs) != 1 {
				t.Fatalf("got %d events, want 1", len(evs))
			}
			if o := aggOf(res, event.TensorOther, -1); o.ReadBytes != tc.other {
				t.Errorf("other read %d, want %d", o.ReadBytes, tc.other)
			}
			if res.Tokens[0].ReadBytes != tc.read {
				t.Errorf("token read %d, want %d", res.Tokens[0].ReadBytes, tc.read)
			}
		})
	}
}

func TestBlockRequestWithItsCompletionUnseenKeepsItsBytesAndHasNoLatency(t *testing.T) {
	seen := block(100, physBase+4096, 4096, 0)
	unseen := wire.BlockEvent{Hdr: hdr(wire.EventTypeEV_BLOCK, 500, 0, 1), IssueTs: 120,
		Sector: (partStart*512 + physBase + 4096) / 512, Dev: diskDev, Bytes: 4096, Error: -1}
	if !unseen.CompletionUnseen() {
		t.Fatal("error -1 is not BLOCK_COMPLETION_UNSEEN")
	}
	res, evs := run(t, seen, ingest.Bytes(&unseen))
	if len(evs) != 2 {
		t.Fatalf("got %d events, want 2: %+v", len(evs), evs)
	}
	if e := evs[0]; e.CompletionUnseen() || e.Dur != 10 || e.ClassName() != "read" {
		t.Errorf("seen request %+v (%s), want latency 10 and class read", e, e.ClassName())
	}
	// 380 ns passed between its issue and the time BPF learned it was
	// done: that is no latency, and must not read as one.
	if e := evs[1]; !e.CompletionUnseen() || e.Dur != 0 || e.ClassName() != "read, completion unseen" || event.BlockWrite(e.Class) {
		t.Errorf("unseen request %+v (%s), want no latency and class \"read, completion unseen\"", e, e.ClassName())
	}
	if tok := res.Tokens[0]; tok.ReadBytes != 8192 || tok.BlockReqs != 2 {
		t.Errorf("token %+v, want both requests' 8192 bytes", tok)
	}
	if evs[0].Tensor != evs[1].Tensor || evs[1].Bytes != 4096 {
		t.Errorf("slices %+v, want the same tensor's 4096 bytes twice", evs)
	}
}

func TestReadaheadIsChargedToTheFaultAsTriggerAndToItsTensorAsLanded(t *testing.T) {
	res, evs := run(t,
		page(wire.EventTypeEV_PAGE_ADD, 50, 7, modelIno, 1, 0),  // tid 7, before the fault began
		page(wire.EventTypeEV_PAGE_ADD, 150, 7, modelIno, 3, 0), // tid 7, inside: expert 0
		page(wire.EventTypeEV_PAGE_ADD, 160, 9, modelIno, 4, 0), // a kworker
		fault(200, 100, 7, modelIno, 4096, 1),                   // attn_q
	)
	trig := map[uint64]uint32{}
	for _, e := range evs {
		if e.Kind == event.KindPageAdd {
			trig[e.Ts] = e.Trigger
		}
	}
	if trig[150] != idQ || trig[50] != event.NoTensor || trig[160] != event.NoTensor {
		t.Errorf("triggers %v, want only the add at 150 triggered by attn_q (%d)", trig, idQ)
	}
	if q := aggOf(res, idQ, -1); q.TriggerBytes != 4096 || q.AddedBytes != 4096 {
		t.Errorf("attn_q %+v, want 4096 trigger bytes and 4096 landed (page 1)", q)
	}
	if x := aggOf(res, idExps, 0); x.AddedBytes != 8192 || x.TriggerBytes != 0 {
		t.Errorf("expert 0 %+v, want 8192 landed, no trigger", x)
	}
	if res.Tokens[0].TriggerBytes != 4096 {
		t.Errorf("token trigger bytes %d, want 4096", res.Tokens[0].TriggerBytes)
	}
}

func TestGraphNodesNameOpsAndReportWeightsNotBackedByAFile(t *testing.T) {
	res, _ := run(t,
		node("blk.0.attn_q.weight", modelIno, 2),
		node("output.weight", 0, 2),
		node("inp_tokens", 0, 1),
		fault(200, 100, 7, modelIno, 4096, 0),
	)
	if len(res.NotBacked) != 1 || res.NotBacked[0] != "output.weight" {
		t.Errorf("not file-backed %v, want [output.weight]", res.NotBacked)
	}
	for _, a := range res.Aggs {
		if a.Tensor == idQ {
			if op := res.OpOf(a.Op, a.Tensor); res.Ops[op] != "MUL_MAT" {
				t.Errorf("op of attn_q fault %q, want MUL_MAT", res.Ops[op])
			}
		}
	}
}

func TestOpProbesNameTheOpOfLaterEvents(t *testing.T) {
	op := wire.OpEvent{Hdr: hdr(wire.EventTypeEV_OP, 90, 7, 1), Op: 1}
	op.Hdr.Op = 5
	f := wire.FaultEvent{Hdr: hdr(wire.EventTypeEV_FAULT, 200, 7, 1), StartTs: 100, Ino: modelIno, FileOff: 4096, Dev: modelDev}
	f.Hdr.Op = 5
	res, evs := run(t, ingest.Bytes(&op), ingest.Bytes(&f))
	if !res.OpProbes || res.Ops[evs[0].Op] != "GET_ROWS" {
		t.Errorf("op %q (probes %v), want GET_ROWS", res.Ops[evs[0].Op], res.OpProbes)
	}
}

func TestExpertSelectionsAreCountedPerLayer(t *testing.T) {
	e := wire.ExpertsEvent{Hdr: hdr(wire.EventTypeEV_EXPERTS, 5, 7, 3), N_used: 2, N_tokens: 2, Count: 4}
	copy(e.Ids[:], []int32{1, 3, 1, 2})
	for i, c := range "ffn_moe_weights-5" {
		e.Name[i] = int8(c)
	}
	res, _ := run(t, ingest.Bytes(&e))
	want := map[uint16]uint64{1: 2, 2: 1, 3: 1}
	if len(res.Experts) != 3 {
		t.Fatalf("selections %+v, want 3", res.Experts)
	}
	for _, s := range res.Experts {
		if s.Layer != 5 || s.Token != 3 || want[s.Expert] != s.Count {
			t.Errorf("selection %+v unexpected", s)
		}
	}
}

func TestOverlappingTensorsAreRejected(t *testing.T) {
	m := testMeta()
	m.Models[0].Tensors[1].Offset = 8192
	if _, err := New(m, &collect{}); err == nil {
		t.Fatal("want an error for overlapping tensors")
	}
}

// The slices of one raw record share its request id and no two records
// share one: readers put block requests, read calls and folio runs back
// together by it, never by guessing from time and thread.
func TestSlicesOfOneRecordShareItsRequestIDAndRecordsDoNot(t *testing.T) {
	tests := []struct {
		name    string
		recs    [][]byte
		records int // distinct ids, in emission order
		events  int
	}{
		{"a block request over two extents and a hole", [][]byte{block(100, physBase+12288, 12288, 0)}, 1, 3},
		{"two block requests at one time", [][]byte{block(100, physBase+12288, 12288, 0), block(100, physBase+12288, 12288, 0)}, 2, 6},
		{"a folio straddling two tensors, then its eviction", [][]byte{page(wire.EventTypeEV_PAGE_ADD, 10, 9, modelIno, 2, 1),
			page(wire.EventTypeEV_PAGE_DEL, 20, 9, modelIno, 2, 1)}, 2, 4},
		{"a run of folios over five tensors", [][]byte{pageRun(wire.EventTypeEV_PAGE_ADD, 10, 13, 9, 0, 8)}, 1, 0},
		{"two faults", [][]byte{fault(10, 5, 9, modelIno, 0, 1), fault(20, 15, 9, modelIno, 4096, 1)}, 2, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, evs := run(t, tc.recs...)
			if tc.events > 0 && len(evs) != tc.events {
				t.Fatalf("got %d events, want %d: %+v", len(evs), tc.events, evs)
			}
			var ids []uint32
			for i, e := range evs {
				if e.Req == 0 {
					t.Fatalf("event %d has no request id: %+v", i, e)
				}
				if i == 0 || e.Req != evs[i-1].Req {
					if slices.Contains(ids, e.Req) {
						t.Fatalf("request id %d names two records: %+v", e.Req, evs)
					}
					ids = append(ids, e.Req)
				}
			}
			if len(ids) != tc.records {
				t.Errorf("%d request ids %v, want %d records: %+v", len(ids), ids, tc.records, evs)
			}
		})
	}
}

// A model on a loop device: each request of the loop device is read again
// from its backing file, on another disk, by the loop driver. Those reads
// are the same bytes: kept as events, counted in no figure.
func TestReadsOfTheFileBeneathALoopDeviceAreKeptAndCountedNowhere(t *testing.T) {
	const lowerDisk, lowerPart = 9 << 20, 4096 // sectors
	meta := testMeta()
	meta.Models[0].Beneath = []rundir.BackingFile{{Path: "disk.img",
		Block:   rundir.BlockDevice{DiskDev: lowerDisk, PartStartSector: lowerPart},
		Extents: []rundir.Extent{{Logical: 0, Physical: 1 << 30, Length: 1 << 20}}}}
	lower := func(partByte uint64, op uint32) []byte {
		return ingest.Bytes(&wire.BlockEvent{Hdr: hdr(wire.EventTypeEV_BLOCK, 200, 0, 1), IssueTs: 190,
			Sector: (lowerPart*512 + partByte) / 512, Dev: lowerDisk, Bytes: 8192, CmdFlags: op})
	}
	tests := []struct {
		name      string
		rec       []byte
		class     string
		tokenRead uint64 // beside the loop device's own 4096
	}{
		{"a read inside the backing file", lower(1<<30+8192, 0), "read beneath", 0},
		{"a read of the backing file's last bytes", lower(1<<30+1<<20-4096, 0), "read beneath", 0},
		{"a read just past the backing file", lower(1<<30+1<<20, 0), "read", 8192},
		{"a read of the lower disk before its partition", ingest.Bytes(&wire.BlockEvent{Hdr: hdr(wire.EventTypeEV_BLOCK, 200, 0, 1), IssueTs: 190,
			Sector: 8, Dev: lowerDisk, Bytes: 8192}), "read", 8192},
		{"a write inside the backing file", lower(1<<30, 1), "write", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sink := &collect{}
			c, err := New(meta, sink)
			if err != nil {
				t.Fatal(err)
			}
			res, evs := feed(t, c, sink, block(100, physBase+4096, 4096, 0), tc.rec)
			if len(evs) != 2 || evs[0].Tensor != idQ {
				t.Fatalf("events %+v, want the loop device's request of attn_q, then the lower one", evs)
			}
			if e := evs[1]; e.ClassName() != tc.class || e.Tensor != event.TensorOther || e.Bytes != 8192 {
				t.Errorf("lower request %+v (%s), want %s of [other file], 8192 bytes", e, e.ClassName(), tc.class)
			}
			if tok := res.Tokens[0]; tok.ReadBytes != 4096+tc.tokenRead {
				t.Errorf("token read %d, want %d", tok.ReadBytes, 4096+tc.tokenRead)
			}
			if o := aggOf(res, event.TensorOther, -1); o.ReadBytes != tc.tokenRead {
				t.Errorf("[other file] read %d, want %d", o.ReadBytes, tc.tokenRead)
			}
		})
	}
}
