package bpf

import "fmt"

// UnreadBufName is a buffer whose name the uretprobe of
// ggml_backend_buffer_name could not read (its page not yet in the
// thread's address space), kept for that thread's next call, which never
// came: Name is the address of the string in the process.
type UnreadBufName struct {
	Tid    uint32
	Buffer uint64
	Name   uint64
}

// UnreadBufNames are the buffer names still pending in the kernel at the
// end of a run, in no order. The map is an LRU of 1024 threads: a thread
// more evicts the oldest, which the recording cannot tell apart from one
// that never asked.
func (t *Tracer) UnreadBufNames() ([]UnreadBufName, error) {
	var (
		out []UnreadBufName
		tid uint32
		v   IocorrBufnameRetry
	)
	it := t.objs.BufnameRetries.Iterate()
	for it.Next(&tid, &v) {
		out = append(out, UnreadBufName{Tid: tid, Buffer: v.Buffer, Name: v.Name})
	}
	if err := it.Err(); err != nil {
		return out, fmt.Errorf("reading the buffer names left unread: %w", err)
	}
	return out, nil
}
