package units_test

import (
	"slices"
	"testing"

	"github.com/iocorr/iocorr/internal/units"
)

func TestParseSizeReadsBinaryAndDecimalUnits(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"123", 123, false},
		{"96MiB", 96 << 20, false},
		{"96M", 96 << 20, false},
		{"500MB", 500e6, false},
		{"1.5G", 3 << 29, false},
		{" 2 GiB ", 2 << 30, false},
		{"0", 0, true},
		{"-1MiB", 0, true},
		{"12XB", 0, true},
		{"MiB", 0, true},
		{"2000TiB", 0, true},
		{"2GiB", 2 << 30, false},
		{"2G", 2 << 30, false},
		{"1.5GiB", 3 << 29, false},
		{"64 KiB", 64 << 10, false},
		{"10b", 10, false},
		{"", 0, true},
		{"-1G", 0, true},
		{"G", 0, true},
		{"1.2.3M", 0, true},
		{"5 parsecs", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := units.ParseSize(tc.in)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("ParseSize(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestExactSizeReadsBackThroughParseSize(t *testing.T) {
	for _, n := range []int64{1, 1000, 1024, 96 << 20, 3 << 29, 1<<30 + 4096, 4 << 30} {
		s := units.ExactSize(n)
		got, err := units.ParseSize(s)
		if err != nil || got != n {
			t.Errorf("ParseSize(ExactSize(%d) = %q) = %d, %v", n, s, got, err)
		}
	}
	if got := units.ExactSize(96 << 20); got != "96MiB" {
		t.Errorf("ExactSize(96 MiB) = %q, want 96MiB", got)
	}
}

func TestExactSizeUsesTheLargestUnitThatDividesIt(t *testing.T) {
	for n, want := range map[int64]string{16 << 20: "16MiB", 1 << 30: "1GiB", 1536 << 10: "1536KiB", 1000: "1000B", 3 << 30: "3GiB"} {
		if got := units.ExactSize(n); got != want {
			t.Errorf("ExactSize(%d) = %s, want %s", n, got, want)
		}
	}
}

func TestBytesAndDurationPickTheUnitBelow1024Or1000(t *testing.T) {
	tests := []struct{ got, want string }{
		{units.Bytes(0), "0 B"},
		{units.Bytes(1023), "1023 B"},
		{units.Bytes(1536), "1.5 KiB"},
		{units.Bytes(1023 << 20), "1023.0 MiB"},
		{units.Bytes(3 << 30), "3.0 GiB"},
		{units.Duration(999), "999 ns"},
		{units.Duration(0), "0 ns"},
		{units.Duration(0.62), "0.62 ns"},
		{units.Duration(7.5), "7.50 ns"},
		{units.Duration(12.4), "12 ns"},
		{units.Duration(1500), "1.5 µs"},
		{units.Duration(2.5e6), "2.5 ms"},
		{units.Duration(3.25e9), "3.25 s"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestSizeFlagsHoldTheBytesOfWhatWasTypedAndRefuseWhatIsNoSize(t *testing.T) {
	for _, tc := range []struct {
		typed string
		want  []int64
		ok    bool
	}{
		{"96MiB", []int64{96 << 20}, true},
		{"64MiB,1G", []int64{64 << 20, 1 << 30}, true},
		{"64MiB,lots", nil, false},
		{"", nil, false},
	} {
		t.Run(tc.typed, func(t *testing.T) {
			var list units.Sizes
			err := list.Set(tc.typed)
			if (err == nil) != tc.ok || tc.ok && (!slices.Equal(list.Bytes, tc.want) || list.String() != tc.typed) {
				t.Errorf("Sizes.Set(%q): %v %q, %v; want %v", tc.typed, list.Bytes, list.String(), err, tc.want)
			}
			if len(tc.want) != 1 {
				return
			}
			var one units.Size
			if err := one.Set(tc.typed); err != nil || int64(one) != tc.want[0] || one.String() != tc.typed {
				t.Errorf("Size.Set(%q): %d %q, %v", tc.typed, one, one.String(), err)
			}
		})
	}
}

func TestShellJoinQuotesWhatTheShellWouldTakeApart(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"llama-completion", "-m", "/m/model.gguf", "-n", "24"}, "llama-completion -m /m/model.gguf -n 24"},
		{[]string{"x", "-p", "The memory of a machine"}, "x -p 'The memory of a machine'"},
		{[]string{"x", "it's", ""}, `x 'it'\''s' ''`},
		{[]string{"x", "$HOME", "a;b"}, `x '$HOME' 'a;b'`},
	} {
		if got := units.ShellJoin(tc.argv); got != tc.want {
			t.Errorf("%q: %s, want %s", tc.argv, got, tc.want)
		}
	}
}
