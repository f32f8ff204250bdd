package ingest

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/iocorr/iocorr/wire"
)

// BenchmarkSpoolReadDecode measures the first stage of ingest: reading a
// spool of a million mixed records (checksums included) and decoding each
// into its generated type.
func BenchmarkSpoolReadDecode(b *testing.B) {
	const n = 1_000_000
	path := filepath.Join(b.TempDir(), "events.spool")
	w, err := CreateSpool(path)
	if err != nil {
		b.Fatal(err)
	}
	f := wire.FaultEvent{Hdr: wire.EventHdr{Type: uint16(wire.EventTypeEV_FAULT)}}
	p := wire.PageEvent{Hdr: wire.EventHdr{Type: uint16(wire.EventTypeEV_PAGE_ADD)}}
	for i := range n {
		var err error
		if i%2 == 0 {
			f.Hdr.Ts, f.FileOff = uint64(i), uint64(i)*4096
			err = w.Write(Bytes(&f))
		} else {
			p.Hdr.Ts, p.Index = uint64(i), uint64(i)
			err = w.Write(Bytes(&p))
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	fi, _ := os.Stat(path)
	b.SetBytes(fi.Size())
	b.ResetTimer()
	for b.Loop() {
		r, err := OpenSpool(path)
		if err != nil {
			b.Fatal(err)
		}
		var st DecodeStats
		var sum uint64
		for {
			rec, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			d, ok := Decode(rec, &st)
			if !ok {
				b.Fatal("record did not decode")
			}
			sum += d.Hdr.Ts
		}
		r.Close()
		if st.Total() != n {
			b.Fatalf("decoded %d records, want %d", st.Total(), n)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}
