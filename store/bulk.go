package store

import (
	"bytes"
	"encoding/binary"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/pb"
	"github.com/dgraph-io/ristretto/v2/z"

	"github.com/iocorr/iocorr/internal/extsort"
)

// The build is a bulk load: every key and value of the store is put into
// an external sort as it comes (events in chunks, their index keys,
// marks, aggregates, dictionaries, the summary) and, at Commit, streamed
// in key order into badger's StreamWriter, which writes them as the
// tables of one level. Its memory is the sort's in-memory bound, its
// merge's read buffers and the tables being written, whatever the run's
// length; its time is linear in what it writes (no compaction rewrites
// it).

// kv is one key and its value.
type kv struct{ k, v []byte }

// kvBytesInMemory bounds the keys and values the build holds before a
// sorted run of them is spilled to a temporary file.
var kvBytesInMemory = 8 << 20

// kvOverhead is what a held kv costs besides its bytes: its slice
// headers, and the allocation's rounding.
const kvOverhead = 64

func kvSize(e *kv) int        { return len(e.k) + len(e.v) + kvOverhead }
func compareKVs(a, b *kv) int { return bytes.Compare(a.k, b.k) }
func (w *Writer) put(k, v []byte) error {
	// One allocation for both: callers reuse their buffers.
	b := make([]byte, len(k)+len(v))
	copy(b, k)
	copy(b[len(k):], v)
	return w.kvs.Add(kv{k: b[:len(k):len(k)], v: b[len(k):]})
}

// kvCodec spills a key and value as the key's length, the key and the
// value. Decoded slices alias the spilled bytes.
var kvCodec = extsort.Codec[kv]{
	Append: func(b []byte, e *kv) []byte {
		b = binary.AppendUvarint(b, uint64(len(e.k)))
		return append(append(b, e.k...), e.v...)
	},
	Decode: func(b []byte, e *kv) error {
		n, w := binary.Uvarint(b)
		if w <= 0 || n > uint64(len(b)-w) {
			return fmt.Errorf("spilled key of %d bytes is cut short", len(b))
		}
		e.k, e.v = b[w:w+int(n)], b[w+int(n):]
		return nil
	},
}

// streamBatch is how many encoded bytes go to the StreamWriter at once.
const streamBatch = 1 << 20

// stream writes the sorted keys and values into the store's tables.
func (w *Writer) stream() error {
	sw := w.db.NewStreamWriter()
	if err := sw.Prepare(); err != nil {
		return fmt.Errorf("writing store: %w", err)
	}
	buf := z.NewBuffer(streamBatch+streamBatch/4, "iocorr.stream")
	defer buf.Release()
	var last []byte
	err := w.kvs.Each(func(e *kv) error {
		// The StreamWriter panics on a key out of order, in a goroutine
		// of its own: a key put twice (a bug) must be an error here.
		if last != nil && bytes.Compare(e.k, last) <= 0 {
			return fmt.Errorf("store key %x put twice", e.k)
		}
		last = append(last[:0], e.k...)
		badger.KVToBuffer(&pb.KV{Key: e.k, Value: e.v, Version: 1}, buf)
		w.rel.read(len(e.k) + len(e.v))
		if buf.LenNoPadding() < streamBatch {
			return nil
		}
		err := sw.Write(buf)
		buf.Reset()
		return err
	})
	if err == nil {
		err = sw.Write(buf)
	}
	if err != nil {
		sw.Cancel()
		return fmt.Errorf("writing store: %w", err)
	}
	if err := sw.Flush(); err != nil {
		return fmt.Errorf("writing store: %w", err)
	}
	return nil
}
