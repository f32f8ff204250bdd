package procmaps

import (
	"strings"
	"testing"
)

func TestParseLineReadsEveryField(t *testing.T) {
	tests := []struct {
		name string
		line string
		want Mapping
	}{
		{"shared model mapping", "7f12a0000000-7f12a8000000 r--s 00001000 fd:01 5316814                    /work/m.gguf",
			Mapping{Start: 0x7f12a0000000, End: 0x7f12a8000000, Perms: "r--s", Offset: 0x1000, Major: 0xfd, Minor: 1, Inode: 5316814, Path: "/work/m.gguf"}},
		{"library as this kernel prints it", "7f42d6fab000-7f42d6fb5000 r--p 00027000 fe:00 325835                     /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
			Mapping{Start: 0x7f42d6fab000, End: 0x7f42d6fb5000, Perms: "r--p", Offset: 0x27000, Major: 0xfe, Inode: 325835, Path: "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"}},
		{"anonymous memory has no path", "7f42d6f00000-7f42d6f21000 rw-p 00000000 00:00 0 ",
			Mapping{Start: 0x7f42d6f00000, End: 0x7f42d6f21000, Perms: "rw-p"}},
		{"anonymous memory without trailing space", "7f42d6f00000-7f42d6f21000 rw-p 00000000 00:00 0",
			Mapping{Start: 0x7f42d6f00000, End: 0x7f42d6f21000, Perms: "rw-p"}},
		{"pseudo file", "7ffde0ebf000-7ffde0ee0000 rw-p 00000000 00:00 0                          [stack]",
			Mapping{Start: 0x7ffde0ebf000, End: 0x7ffde0ee0000, Perms: "rw-p", Path: "[stack]"}},
		{"top of the address space", "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]",
			Mapping{Start: 0xffffffffff600000, End: 0xffffffffff601000, Perms: "--xp", Path: "[vsyscall]"}},
		{"path with spaces, runs of them kept", "1000-2000 r--p 00000000 08:11 42    /models/my  model (q4).gguf",
			Mapping{Start: 0x1000, End: 0x2000, Perms: "r--p", Major: 8, Minor: 0x11, Inode: 42, Path: "/models/my  model (q4).gguf"}},
		{"deleted file", "1000-2000 r--s 00002000 fe:00 99   /tmp/m.gguf (deleted)",
			Mapping{Start: 0x1000, End: 0x2000, Perms: "r--s", Offset: 0x2000, Major: 0xfe, Inode: 99, Path: "/tmp/m.gguf", Deleted: true}},
		{"large device numbers", "1000-2000 r--p 00000000 fff:fffff 7 /x",
			Mapping{Start: 0x1000, End: 0x2000, Perms: "r--p", Major: 0xfff, Minor: 0xfffff, Inode: 7, Path: "/x"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseLine(tc.line)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestParseLineRefusesWhatIsNotAMapsLine(t *testing.T) {
	for _, bad := range []string{
		"",
		"garbage",
		"zz-10 r--p 0 fd:01 1",
		"1000 r--p 0 fd:01 1",
		"2000-1000 r--p 0 fd:01 1",
		"1000-2000 r--p 0 fd01 1",
		"1000-2000 r-p 0 fd:01 1",
		"1000-2000 r--p xyz fd:01 1",
		"1000-2000 r--p 0 1000:01 1",
		"1000-2000 r--p 0 fd:100000 1",
		"1000-2000 r--p 0 fd:01 -1",
		"1000-2000 r--p 0 fd:01",
	} {
		if m, err := ParseLine(bad); err == nil {
			t.Errorf("%q parsed as %+v", bad, m)
		}
	}
}

func TestParseNamesTheLineThatDoesNotParse(t *testing.T) {
	_, err := Parse(strings.NewReader("1000-2000 r--p 0 fd:01 1 /a\nbroken\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("got %v, want an error naming line 2", err)
	}
}

func TestContainingFindsTheMappingThatHoldsAnAddressOrNone(t *testing.T) {
	ms := []Mapping{{Start: 0x1000, End: 0x3000}, {Start: 0x5000, End: 0x6000}}
	tests := []struct {
		name string
		addr uint64
		want int
	}{
		{"the first byte of a mapping", 0x1000, 0},
		{"the last byte of a mapping", 0x2fff, 0},
		{"the end of a mapping is past it", 0x3000, -1},
		{"a hole between mappings", 0x4000, -1},
		{"inside the second", 0x5800, 1},
		{"below every mapping", 0x10, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Containing(ms, tc.addr); got != tc.want {
				t.Errorf("Containing(%#x) = %d, want %d", tc.addr, got, tc.want)
			}
		})
	}
}
