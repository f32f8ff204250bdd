package elfinfo

import (
	"encoding/binary"
	"testing"
)

// note builds one ELF note: header, name and descriptor padded to align.
func note(name string, typ uint32, desc []byte, align int) []byte {
	pad := func(b []byte) []byte {
		for len(b)%align != 0 {
			b = append(b, 0)
		}
		return b
	}
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(name)))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(desc)))
	b = binary.LittleEndian.AppendUint32(b, typ)
	b = pad(append(b, name...))
	return pad(append(b, desc...))
}

func TestFindGNUBuildIDWalksUntrustedNotes(t *testing.T) {
	id := []byte{0xde, 0xad, 0xbe, 0xef, 1}
	cat := func(bs ...[]byte) []byte {
		var out []byte
		for _, b := range bs {
			out = append(out, b...)
		}
		return out
	}
	tests := []struct {
		name    string
		notes   []byte
		align   uint64
		want    []byte
		wantErr bool
	}{
		{"build id alone", note("GNU\x00", ntGNUBuildID, id, 4), 4, id, false},
		{"after another owner's note", cat(note("Go\x00", 4, []byte("abcdefg"), 4), note("GNU\x00", ntGNUBuildID, id, 4)), 4, id, false},
		{"after a GNU note of another type", cat(note("GNU\x00", 5, make([]byte, 12), 8), note("GNU\x00", ntGNUBuildID, id, 8)), 8, id, false},
		{"type 3 of another owner is not it", note("Xen\x00", ntGNUBuildID, id, 4), 4, nil, false},
		{"no notes", nil, 4, nil, false},
		{"truncated header", []byte{4, 0, 0, 0, 5}, 4, nil, true},
		{"descriptor past the end", note("GNU\x00", ntGNUBuildID, id, 4)[:20], 4, nil, true},
		{"name size past the end", cat(binary.LittleEndian.AppendUint32(nil, 1<<31), make([]byte, 8)), 4, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := findGNUBuildID(tc.notes, tc.align, binary.LittleEndian)
			if (err != nil) != tc.wantErr || string(got) != string(tc.want) {
				t.Errorf("got %x, %v; want %x (error: %v)", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
