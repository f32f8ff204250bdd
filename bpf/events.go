package bpf

// EventTypeCount bounds the event type values (enum event_type).
const EventTypeCount = uint32(IocorrEventTypeEV_TYPE_MAX)

var eventTypeNames = map[uint32]string{
	uint32(IocorrEventTypeEV_FAULT):         "fault",
	uint32(IocorrEventTypeEV_FILEMAP_FAULT): "filemap_fault",
	uint32(IocorrEventTypeEV_PAGE_ADD):      "page_add",
	uint32(IocorrEventTypeEV_PAGE_DEL):      "page_delete",
	uint32(IocorrEventTypeEV_READAHEAD):     "readahead",
	uint32(IocorrEventTypeEV_BLOCK):         "block",
	uint32(IocorrEventTypeEV_DECODE_BEGIN):  "decode_begin",
	uint32(IocorrEventTypeEV_DECODE_END):    "decode_end",
	uint32(IocorrEventTypeEV_GRAPH):         "graph",
	uint32(IocorrEventTypeEV_NODE):          "node",
	uint32(IocorrEventTypeEV_OP):            "op",
	uint32(IocorrEventTypeEV_EXPERTS):       "experts",
	uint32(IocorrEventTypeEV_TASK):          "task",
	uint32(IocorrEventTypeEV_MMAP):          "mmap",
	uint32(IocorrEventTypeEV_PAGE_RUN):      "page_run",
}

// EventTypeName names an event type for counts and messages.
func EventTypeName(t uint32) string {
	if n, ok := eventTypeNames[t]; ok {
		return n
	}
	return "unknown"
}
