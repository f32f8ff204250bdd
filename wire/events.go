package wire

import "math/bits"

// EventTypeCount bounds the event type values (enum event_type).
const EventTypeCount = uint32(EventTypeEV_TYPE_MAX)

var eventTypeNames = map[uint32]string{
	uint32(EventTypeEV_FAULT):         "fault",
	uint32(EventTypeEV_FAULT_COUNT):   "fault_count",
	uint32(EventTypeEV_FILEMAP_FAULT): "filemap_fault",
	uint32(EventTypeEV_PAGE_ADD):      "page_add",
	uint32(EventTypeEV_PAGE_DEL):      "page_delete",
	uint32(EventTypeEV_READAHEAD):     "readahead",
	uint32(EventTypeEV_BLOCK):         "block",
	uint32(EventTypeEV_DECODE_BEGIN):  "decode_begin",
	uint32(EventTypeEV_DECODE_END):    "decode_end",
	uint32(EventTypeEV_GRAPH):         "graph",
	uint32(EventTypeEV_NODE):          "node",
	uint32(EventTypeEV_OP):            "op",
	uint32(EventTypeEV_EXPERTS):       "experts",
	uint32(EventTypeEV_TASK):          "task",
	uint32(EventTypeEV_MMAP):          "mmap",
	uint32(EventTypeEV_MUNMAP):        "munmap",
	uint32(EventTypeEV_PAGE_RUN):      "page_run",
	uint32(EventTypeEV_SCHED):         "sched",
	uint32(EventTypeEV_READ):          "read",
	uint32(EventTypeEV_PLACE):         "place",
	uint32(EventTypeEV_BUFNAME):       "buffer_name",
	uint32(EventTypeEV_GRAPH_END):     "graph_end",
}

// EventTypeName names an event type for counts and messages.
func EventTypeName(t uint32) string {
	if n, ok := eventTypeNames[t]; ok {
		return n
	}
	return "unknown"
}

// RunPages is IOCORR_RUN_PAGES: the window of a page-cache run with holes.
const RunPages = len(PageRunEvent{}.Pages) * 64

// Ranges calls yield with each stretch of contiguous pages of the run, in
// ascending order (first page, pages). It is false for a damaged run: a
// run with holes wider than its window, or whose bitmap does not hold
// nr_pages pages of its span; yield is then not called.
func (e *PageRunEvent) Ranges(yield func(first, n uint64)) bool {
	if e.NrPages == e.Span {
		if e.Span > 0 {
			yield(e.Index, uint64(e.Span))
		}
		return e.Span > 0
	}
	if e.NrPages > e.Span || e.Span > uint32(RunPages) {
		return false
	}
	var n uint32
	for _, w := range e.Pages {
		n += uint32(bits.OnesCount64(w))
	}
	if n != e.NrPages || e.Span == 0 || !e.has(0) || !e.has(e.Span-1) {
		return false
	}
	for i := uint32(0); i < e.Span; {
		if !e.has(i) {
			i++
			continue
		}
		j := i
		for j < e.Span && e.has(j) {
			j++
		}
		yield(e.Index+uint64(i), uint64(j-i))
		i = j
	}
	return true
}

func (e *PageRunEvent) has(i uint32) bool { return e.Pages[i/64]&(1<<(i%64)) != 0 }

// CString converts a fixed-size C char array from an event to a string.
func CString(b []int8) string {
	for i, c := range b {
		if c == 0 {
			return string(int8sToBytes(b[:i]))
		}
	}
	return string(int8sToBytes(b))
}

func int8sToBytes(b []int8) []byte {
	out := make([]byte, len(b))
	for i, c := range b {
		out[i] = byte(c)
	}
	return out
}

// CompletionUnseen says whether BPF recorded the request without seeing
// its completion (block.bpf.h's block__emit_unseen, or
// bpf.Tracer.TakeUnfinishedBlockRequests): it has no latency.
func (e *BlockEvent) CompletionUnseen() bool {
	return uint32(e.Error) == uint32(BlockCompletionBLOCK_COMPLETION_UNSEEN)
}
