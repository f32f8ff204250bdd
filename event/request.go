package event

import (
	"math/bits"
	"slices"
	"strconv"
)

// Sequence-set states of a token, as the kernel stamps them
// (decode_event.seq_state, enum seq_state in bpf/iocorr.h).
const (
	SeqRead    uint32 = 1 // the batch was read; else the set is unknown
	SeqWide    uint32 = 2 // a sequence id outside 0..63 is not in the set
	SeqPartial uint32 = 4 // tokens or ids past the probe's read bound are not in the set
	SeqDefault uint32 = 8 // batch.seq_id was NULL: llama.cpp runs it as sequence 0
	// SeqUncounted: a sequence of the set is at or past SeqCounted, so
	// TokenInfo.SeqTokens does not count its tokens.
	SeqUncounted uint32 = 16
)

// SeqCounted is how many sequences (0..SeqCounted-1) the kernel counts
// the batch's tokens of (decode_event.seq_tokens, SEQ_COUNTED).
const SeqCounted = 8

// Request keys that are no single sequence. A token whose batch serves
// several sequences (llama-server batching requests in flight) is Shared
// in the per-token export; a query by request splits it among its
// sequences (Shares, Split), and charges it whole to Shared only when its
// set of sequences is not known whole.
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

// Share is one sequence's part of a token whose batch serves several:
// its weight is the batch's tokens of that sequence.
type Share struct {
	Seq    int
	Weight uint64
}

// Shares are the sequences a token's I/O is split among, in sequence
// order, when its batch serves several and the set is complete (read,
// no id out of range, none past the read bound); nil otherwise. Each
// weighs its tokens in the batch; when those were not counted (a
// sequence past SeqCounted, or a count of 0 from a kernel that did not
// count), every sequence weighs the same.
func (t *TokenInfo) Shares() []Share {
	if t.Token == 0 || t.SeqState&SeqRead == 0 || t.SeqState&(SeqWide|SeqPartial) != 0 || bits.OnesCount64(t.Seqs) < 2 {
		return nil
	}
	var out []Share
	counted := t.SeqState&SeqUncounted == 0
	for s := range 64 {
		if t.Seqs&(1<<s) == 0 {
			continue
		}
		w := uint64(0)
		if s < SeqCounted {
			w = uint64(t.SeqTokens[s])
		}
		counted = counted && w > 0
		out = append(out, Share{Seq: s, Weight: w})
	}
	if !counted {
		for i := range out {
			out[i].Weight = 1
		}
	}
	return out
}

// Split divides c among shares by weight, counter by counter, in whole
// units that sum to c exactly: each share gets the floor of its part,
// and what is left (fewer units than shares) goes one unit each to the
// shares with the largest fractional parts, the lower sequence first on
// a tie. out[i] is shares[i]'s.
func Split(c *Counters, shares []Share) []Counters {
	out := make([]Counters, len(shares))
	var total uint64
	for _, s := range shares {
		total += s.Weight
	}
	if total == 0 {
		return out
	}
	type part struct {
		i   int
		rem uint64 // the fraction's numerator, over total
	}
	parts := make([]part, len(shares))
	for _, d := range CounterFields {
		v := *d.Field(c)
		var given uint64
		for i, s := range shares {
			// v*w/total without overflow: the product is 128 bits.
			hi, lo := bits.Mul64(v, s.Weight)
			q, r := bits.Div64(hi, lo, total)
			*d.Field(&out[i]) = q
			given += q
			parts[i] = part{i, r}
		}
		left := v - given
		if left == 0 {
			continue
		}
		slices.SortStableFunc(parts, func(a, b part) int {
			if a.rem != b.rem {
				if a.rem > b.rem {
					return -1
				}
				return 1
			}
			return shares[a.i].Seq - shares[b.i].Seq
		})
		for k := uint64(0); k < left; k++ {
			*d.Field(&out[parts[k].i])++
		}
	}
	return out
}
