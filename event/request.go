package event

import (
	"math/bits"
	"strconv"
)

// Sequence-set states of a token, as the kernel stamps them
// (decode_event.seq_state, enum seq_state in bpf/iocorr.h).
const (
	SeqRead    uint32 = 1 // the batch was read; else the set is unknown
	SeqWide    uint32 = 2 // a sequence id outside 0..63 is not in the set
	SeqPartial uint32 = 4 // tokens or ids past the probe's read bound are not in the set
	SeqDefault uint32 = 8 // batch.seq_id was NULL: llama.cpp runs it as sequence 0
)

// Request keys that are no single sequence. A token whose batch serves
// several sequences (llama-server batching requests in flight) is charged
// whole to Shared, so that the rows of a query by request still sum to the
// run's totals.
const (
	RequestShared     = "shared"
	RequestUnknown    = "[unknown]"    // the batch's sequences were not read
	RequestIncomplete = "[incomplete]" // one sequence read, others past the bound
	RequestNone       = "[no decode]"  // before the first llama_decode
)

// RequestOrder places request keys: sequences by id, then the pseudo
// requests.
func RequestOrder(key string) int {
	if n, err := strconv.Atoi(key); err == nil {
		return n
	}
	switch key {
	case RequestShared:
		return 64
	case RequestIncomplete:
		return 65
	case RequestUnknown:
		return 66
	}
	return 67
}

// Request names the request (llama.cpp sequence id) a token serves, or
// the pseudo request it is charged to. Token 0 is the I/O before the
// first llama_decode (of the window, when attached).
func (t *TokenInfo) Request() string {
	switch n := bits.OnesCount64(t.Seqs); {
	case t.Token == 0:
		return RequestNone
	case t.SeqState&SeqRead == 0:
		return RequestUnknown
	case n >= 2:
		return RequestShared
	case t.SeqState&(SeqWide|SeqPartial) != 0:
		return RequestIncomplete
	case n == 1:
		return strconv.Itoa(bits.TrailingZeros64(t.Seqs))
	}
	return RequestUnknown
}
