package ingest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/iocorr/iocorr/wire"
)

func writeSpool(t *testing.T, recs [][]byte) []byte {
	t.Helper()
	p := filepath.Join(t.TempDir(), "s")
	if err := WriteSpool(p, recs); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readAll(t *testing.T, b []byte) ([][]byte, SpoolStats) {
	t.Helper()
	r, err := NewSpoolReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out, r.Stats()
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, append([]byte(nil), rec...))
	}
}

func records(n int) [][]byte {
	var recs [][]byte
	for i := 0; i < n; i++ {
		recs = append(recs, []byte(fmt.Sprintf("record-%03d-%s", i, bytes.Repeat([]byte{byte(i)}, i%40))))
	}
	return recs
}

func TestSpoolRoundTripKeepsOrderAndBytes(t *testing.T) {
	recs := records(100)
	got, st := readAll(t, writeSpool(t, recs))
	if len(got) != len(recs) || st.BadFrames != 0 || st.TornTail != 0 {
		t.Fatalf("got %d records, stats %+v", len(got), st)
	}
	for i := range recs {
		if !bytes.Equal(got[i], recs[i]) {
			t.Fatalf("record %d = %q, want %q", i, got[i], recs[i])
		}
	}
}

func TestSpoolDamage(t *testing.T) {
	recs := records(50)
	clean := writeSpool(t, recs)
	// Offset of record i's frame.
	frameAt := func(i int) int {
		off := spoolHeaderLen
		for j := 0; j < i; j++ {
			off += frameHeaderLen + len(recs[j])
		}
		return off
	}
	tests := []struct {
		name     string
		damage   func([]byte) []byte
		wantN    int
		wantBad  uint64
		wantTorn bool
		wantMiss int // index of the record that must be missing, -1 none
	}{
		{"torn tail drops only the partial frame", func(b []byte) []byte { return b[:len(b)-3] }, 49, 0, true, 49},
		{"flipped payload byte skips that record only", func(b []byte) []byte { b[frameAt(10)+frameHeaderLen+2] ^= 0xff; return b }, 49, 1, false, 10},
		{"damaged length skips that record only", func(b []byte) []byte { b[frameAt(20)+2] = 0xff; return b }, 49, 1, false, 20},
		{"damaged sync skips that record only", func(b []byte) []byte { b[frameAt(30)] = 0; return b }, 49, 1, false, 30},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.damage(append([]byte(nil), clean...))
			got, st := readAll(t, b)
			if len(got) != tc.wantN || st.BadFrames != tc.wantBad || (st.TornTail > 0) != tc.wantTorn {
				t.Fatalf("got %d records, stats %+v", len(got), st)
			}
			for _, g := range got {
				if tc.wantMiss >= 0 && bytes.Equal(g, recs[tc.wantMiss]) {
					t.Fatalf("damaged record %d was returned", tc.wantMiss)
				}
			}
		})
	}
}

func TestSpoolRejectsOtherFiles(t *testing.T) {
	for _, b := range [][]byte{nil, []byte("GGUF\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00")} {
		if _, err := NewSpoolReader(bytes.NewReader(b)); !errors.Is(err, ErrNotSpool) {
			t.Errorf("NewSpoolReader(%q) = %v, want ErrNotSpool", b, err)
		}
	}
}

func TestCreateSpoolRefusesToOverwrite(t *testing.T) {
	p := filepath.Join(t.TempDir(), "s")
	os.WriteFile(p, []byte("x"), 0o644)
	if _, err := CreateSpool(p); err == nil {
		t.Fatal("CreateSpool overwrote an existing file")
	}
}

// A spool holds C structs verbatim: one another iocorr wrote (an older
// format, or programs whose structs differ) is refused by name, never
// read with its records counted as short or misread.
func TestSpoolOfAnotherIocorrIsRefused(t *testing.T) {
	good := writeSpool(t, [][]byte{[]byte("record")})
	for _, tc := range []struct {
		name   string
		change func(h []byte)
		want   error
	}{
		{"this iocorr's", func([]byte) {}, nil},
		{"format 1, before layouts were recorded", func(h []byte) {
			binary.LittleEndian.PutUint32(h[8:], 1)
			binary.LittleEndian.PutUint32(h[12:], 0)
		}, ErrOtherLayout},
		{"another layout", func(h []byte) { binary.LittleEndian.PutUint32(h[12:], wire.Layout+1) }, ErrOtherLayout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := bytes.Clone(good)
			tc.change(b)
			_, err := NewSpoolReader(bytes.NewReader(b))
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Errorf("NewSpoolReader = %v, want %v", err, tc.want)
			}
		})
	}
}
