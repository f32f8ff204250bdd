package gguf

import (
	"slices"
	"strings"
	"testing"
)

func givenOnly(names ...string) func(string) bool {
	return func(n string) bool { return slices.Contains(names, n) }
}

func TestResolveRefusesAZeroGivenAndDefaultsAZeroLeftOut(t *testing.T) {
	for _, field := range []string{"layers", "embd", "ff", "heads", "kv-heads", "vocab", "ctx"} {
		_, err := SynthOptions{Type: "f16", Given: givenOnly(field)}.Resolve()
		if err == nil || !strings.HasPrefix(err.Error(), field+" 0: want at least 1") {
			t.Errorf("%s given as 0: %v", field, err)
		}
	}
	s, err := SynthOptions{Type: "f16"}.Resolve()
	if err != nil || s != (SynthSpec{Type: TypeF16}).WithDefaults() {
		t.Fatalf("nothing given: %+v, %v; want the defaults", s, err)
	}
}

func TestResolveChecksWhatTheSpecCannotTellFromADefault(t *testing.T) {
	tests := []struct {
		name string
		o    SynthOptions
		want string
	}{
		{"experts-used 0 given", SynthOptions{Spec: SynthSpec{Experts: 8}, Type: "f16", Given: givenOnly("experts-used")}, "experts-used 0: want 1 to experts (8)"},
		{"empty name given", SynthOptions{Type: "f16", Given: givenOnly("name")}, `name is empty (leave it out for "iocorr-synth")`},
		{"type by a name synth cannot fill", SynthOptions{Type: "iq4_xs"}, `type "iq4_xs": want f16, f32, bf16, q8_0, q4_k, q6_k or mxfp4`},
		{"an arch synth does not write, before sizing", SynthOptions{Spec: SynthSpec{Arch: "mixtral", Experts: 4}, Type: "f16", Size: 24 << 20}, `arch "mixtral"`},
		{"a size out of reach", SynthOptions{Type: "f16", Size: 100}, "cannot reach 100 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.o.Resolve(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}

func TestResolveKeepsTheShapeGivenWhenSizing(t *testing.T) {
	s, err := SynthOptions{Spec: SynthSpec{Layers: 3, Embd: 5000}, Type: "f16", Size: 24 << 20, Given: givenOnly("layers")}.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.Layout()
	if err != nil {
		t.Fatal(err)
	}
	// Layers given are kept; embd, not given, was chosen for the size.
	if s.Layers != 3 || s.Embd == 5000 || f.Size < 20<<20 || f.Size > 28<<20 {
		t.Errorf("layers %d, embd %d, %d bytes", s.Layers, s.Embd, f.Size)
	}
}
