package gguf

import (
	"fmt"
	"slices"
	"strings"
)

// SynthOptions are synth's settings as a person gives them: the spec,
// the weight type by name, a target size, and which fields were given.
// A zero inside SynthSpec means "the default", so a zero given would be
// replaced silently: Resolve refuses it instead.
type SynthOptions struct {
	Spec SynthSpec
	Type string // f16, f32, bf16, q8_0, q4_k, q6_k or mxfp4 (ParseType's names)
	// Like is a released model's shape (SynthLikes): its fields but for
	// those given, and its type unless Type is given; "" for none.
	Like string
	// Size is the file size to reach (SizeSynth): the shape fields not
	// given are chosen for it; 0 keeps the shape as given.
	Size int64
	// Given says whether a field was given, by its name in the messages:
	// layers, embd, ff, heads, kv-heads, experts, experts-used, vocab,
	// ctx, name, arch, type.
	// Nil: none was.
	Given func(name string) bool
}

// Resolve checks the options and returns the spec to write, defaults
// filled and validated; an error names the field and the value.
func (o SynthOptions) Resolve() (SynthSpec, error) {
	s := o.Spec
	given := func(name string) bool { return o.Given != nil && o.Given(name) }
	for _, f := range []struct {
		name string
		v    int
	}{{"layers", s.Layers}, {"embd", s.Embd}, {"ff", s.FF}, {"heads", s.Heads}, {"kv-heads", s.KVHeads}, {"vocab", s.Vocab}, {"ctx", s.Ctx}} {
		if given(f.name) && f.v < 1 {
			return s, fmt.Errorf("%s %d: want at least 1 (leave it out for its default)", f.name, f.v)
		}
	}
	if given("experts-used") && s.Experts > 0 && s.ExpertsUsed < 1 {
		return s, fmt.Errorf("experts-used %d: want 1 to experts (%d)", s.ExpertsUsed, s.Experts)
	}
	if given("name") && s.Name == "" {
		return s, fmt.Errorf("name is empty (leave it out for %q)", s.WithDefaults().Name)
	}
	if o.Like != "" {
		base, err := SynthLike(o.Like)
		if err != nil {
			return s, err
		}
		if o.Size != 0 || given("arch") || given("embd") || given("heads") {
			return s, fmt.Errorf("like fixes arch, embd, heads and the size: leave them out")
		}
		for name, f := range map[string][2]*int{"layers": {&s.Layers, &base.Layers}, "ff": {&s.FF, &base.FF},
			"kv-heads": {&s.KVHeads, &base.KVHeads}, "experts": {&s.Experts, &base.Experts},
			"experts-used": {&s.ExpertsUsed, &base.ExpertsUsed}, "vocab": {&s.Vocab, &base.Vocab}} {
			if !given(name) {
				*f[0] = *f[1]
			}
		}
		s.Arch, s.Embd, s.Heads, s.HeadDim = base.Arch, base.Embd, base.Heads, base.HeadDim
		if !given("type") {
			o.Type = base.Type.String()
		}
		if !given("name") {
			s.Name = base.Name
		}
	}
	if err := s.checkArch(); err != nil {
		return s, err
	}
	t, ok := ParseType(o.Type)
	if !ok || !slices.Contains(SynthTypes, t) {
		return s, fmt.Errorf("type %q: want f16, f32, bf16, q8_0, q4_k, q6_k or mxfp4 (for other types write bf16 and run llama.cpp's llama-quantize on it)", o.Type)
	}
	s.Type = t
	if o.Size != 0 {
		// Shape fields given are kept; the rest are chosen for the size.
		for name, field := range map[string]*int{"layers": &s.Layers, "embd": &s.Embd, "ff": &s.FF, "heads": &s.Heads} {
			if !given(name) {
				*field = 0
			}
		}
		var err error
		if s, err = SizeSynth(o.Size, s); err != nil {
			return s, err
		}
	}
	s = s.WithDefaults()
	return s, s.Validate()
}

// checkArch refuses an architecture synth does not write, and a dense
// model of one that is mixture-of-experts only; "" is llama.
func (s SynthSpec) checkArch() error {
	arch := s.WithDefaults().Arch
	if !slices.Contains(SynthArchs, arch) {
		return fmt.Errorf("arch %q: want one of %s", arch, strings.Join(SynthArchs, ", "))
	}
	if arch != ArchLlama && s.Experts == 0 {
		return fmt.Errorf("arch %s is mixture-of-experts only: give experts", arch)
	}
	return nil
}
