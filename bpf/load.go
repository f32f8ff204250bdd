package bpf

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// programsNotTaken are the programs of the paths no capability took:
// Open does not load them. A program of no path at all (user-space
// probes, the flush) is always loaded.
func programsNotTaken(caps []capChoice) []string {
	var taken, all []string
	for _, c := range caps {
		for i := range c.cap.Paths {
			p := &c.cap.Paths[i]
			all = append(all, p.programs()...)
			if p == c.path {
				taken = append(taken, p.programs()...)
			}
		}
	}
	var out []string
	for _, name := range all {
		if !slices.Contains(taken, name) && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// chosenPrimary says whether the capability took its primary path.
func chosenPrimary(caps []capChoice, name string) bool {
	for _, c := range caps {
		if c.Name == name {
			return c.path != nil && c.Primary
		}
	}
	return false
}

// pageRecords is the page-cache record mode: the one asked for, or one
// record per folio where the kernel has no bpf_loop (runs loop over their
// slots; folios do not).
func pageRecords(caps []capChoice, asked PageRecords) PageRecords {
	if !chosenPrimary(caps, CapLoops) {
		return PageFolios
	}
	return asked
}

// assignObjects fills the generated objects from a collection that may
// lack programs of paths not taken (their fields stay nil); every map and
// variable must be there.
func assignObjects(objs *IocorrObjects, coll *ebpf.Collection) error {
	fill := func(dst any, get func(name string) (reflect.Value, bool), optional bool) error {
		v := reflect.ValueOf(dst).Elem()
		for i := 0; i < v.NumField(); i++ {
			name := v.Type().Field(i).Tag.Get("ebpf")
			got, ok := get(name)
			if !ok {
				if optional {
					continue
				}
				return fmt.Errorf("BPF object has no %s", name)
			}
			v.Field(i).Set(got)
		}
		return nil
	}
	if err := fill(&objs.IocorrMaps, func(n string) (reflect.Value, bool) {
		m, ok := coll.Maps[n]
		return reflect.ValueOf(m), ok
	}, false); err != nil {
		return err
	}
	if err := fill(&objs.IocorrVariables, func(n string) (reflect.Value, bool) {
		m, ok := coll.Variables[n]
		return reflect.ValueOf(m), ok
	}, false); err != nil {
		return err
	}
	return fill(&objs.IocorrPrograms, func(n string) (reflect.Value, bool) {
		p, ok := coll.Programs[n]
		return reflect.ValueOf(p), ok
	}, true)
}

// program is the loaded program of that name (nil when not loaded).
func (t *Tracer) program(name string) *ebpf.Program {
	v := reflect.ValueOf(&t.objs.IocorrPrograms).Elem()
	for i := 0; i < v.NumField(); i++ {
		if v.Type().Field(i).Tag.Get("ebpf") == name {
			return v.Field(i).Interface().(*ebpf.Program)
		}
	}
	return nil
}

// perfPrograms are the programs that run on software perf events, one
// event per CPU, and their events.
var perfPrograms = map[string]Need{
	"fault_begin_perf": needPerfFaults,
	"fault_major":      needPerfMajor,
	"fault_minor":      needPerfMinor,
}

// refusedProgram matches the program cilium/ebpf names in a load error.
var refusedProgram = regexp.MustCompile(`program (\w+):`)

// demoteRefused makes NA the optional capability whose program the
// verifier refused in err (an old kernel's verifier can refuse what a
// newer one takes: 6.1 counts a bpf_loop callback's stack with its
// caller's), every capability whose path needs one of its hooks (the
// readahead trigger rebuilt from the page cache's adds) and every one it
// records (RecordedBy: the fault offsets), so that Open can
// load the rest. It returns the programs to leave out, none when err is
// no verifier refusal of an optional capability's program.
func demoteRefused(caps []capChoice, err error) []string {
	var ve *ebpf.VerifierError
	m := refusedProgram.FindStringSubmatch(err.Error())
	if !errors.As(err, &ve) || m == nil {
		return nil
	}
	var refused *capChoice
	for i := range caps {
		if c := &caps[i]; c.path != nil && !c.Required && slices.Contains(c.path.programs(), m[1]) {
			refused = c
		}
	}
	if refused == nil {
		return nil
	}
	why := fmt.Sprintf("this kernel's verifier refused program %s: %s", m[1], strings.TrimLeft(firstLine(ve.Error()), ": "))
	var hooks []Need
	for _, a := range refused.path.attach {
		hooks = append(hooks, a.need)
	}
	var out []string
	for i := range caps {
		c := &caps[i]
		if c.path == nil || c.Required {
			continue
		}
		needsHook := slices.ContainsFunc(c.path.needs, func(n Need) bool { return slices.Contains(hooks, n) })
		if c != refused && !needsHook {
			continue
		}
		out = append(out, c.path.programs()...)
		c.path = nil
		c.Path, c.Primary, c.Lost, c.Why = "", false, c.cap.NA, why
	}
	// The fault offsets' programs only serve the fault programs: without
	// those, no offset is recorded, though their own programs would load.
	return append(out, demoteUnrecorded(caps)...)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// attachKernel attaches the kernel side of every capability's path. A
// path that fails to attach makes its capability NA, with the error, and
// the run goes on; only a required capability stops it.
func (t *Tracer) attachKernel() error {
	for i := range t.caps {
		c := &t.caps[i]
		// A capability recorded by one that failed to attach has nothing
		// to record (capabilities come after what records them).
		demoteUnrecorded(t.caps)
		if c.path == nil {
			continue
		}
		err := t.attachPath(c.path)
		if err == nil {
			continue
		}
		if c.Required {
			return fmt.Errorf("%s: %w", c.Name, err)
		}
		c.path = nil
		c.Path, c.Primary, c.Lost = "", false, c.cap.NA
		c.Why = fmt.Sprintf("%s did not attach: %v", c.cap.Paths[0].Name, err)
	}
	// A capability with no path is listed with the probes that failed,
	// so that what reads the probes (the report's header) names it.
	for _, c := range t.caps {
		if c.path == nil && !c.Off {
			t.addProbe(Probe{Kind: "capability", Target: c.Name, Error: "NA: " + c.Lost + " (" + c.Why + ")"})
		}
	}
	return nil
}

// attachPath attaches a path's programs; on an error it detaches what it
// attached.
func (t *Tracer) attachPath(p *Path) error {
	nLinks, nPerf := len(t.links), len(t.perf)
	undo := func() {
		for _, l := range t.links[nLinks:] {
			l.Close()
		}
		for _, pe := range t.perf[nPerf:] {
			pe.Close()
		}
		t.links, t.perf = t.links[:nLinks], t.perf[:nPerf]
	}
	for _, a := range p.attach {
		var (
			l      link.Link
			err    error
			target = a.need.Name
		)
		prog := t.program(a.prog)
		if prog == nil {
			undo()
			return fmt.Errorf("program %s was not loaded", a.prog)
		}
		switch a.need.Kind {
		case NeedBTF:
			l, err = link.AttachTracing(link.TracingOptions{Program: prog})
		case NeedTracepoint:
			group, name, _ := strings.Cut(target, "/")
			l, err = link.Tracepoint(group, name, prog, nil)
		default:
			err = fmt.Errorf("cannot attach to a %s", a.need.Kind)
		}
		if err != nil {
			t.addProbe(Probe{Kind: string(a.need.Kind), Target: target, Error: err.Error()})
			undo()
			return fmt.Errorf("attaching %s %s: %w", a.need.Kind, target, err)
		}
		t.links = append(t.links, l)
		t.addProbe(Probe{Kind: string(a.need.Kind), Target: target})
	}
	for _, name := range p.progs {
		need, ok := perfPrograms[name]
		if !ok || slices.Contains(t.opts.unwanted(), name) {
			continue // attached later by its own code (op probes), or left out
		}
		prog := t.program(name)
		if prog == nil {
			undo()
			return fmt.Errorf("program %s was not loaded", name)
		}
		for cpu := 0; cpu < runtime.NumCPU(); cpu++ {
			pe, err := openSoftwareEvent(need.perf, cpu, prog)
			if err != nil {
				t.addProbe(Probe{Kind: "perf_event", Target: need.Name, Error: err.Error()})
				undo()
				return fmt.Errorf("attaching perf event %s on cpu %d: %w", need.Name, cpu, err)
			}
			t.perf = append(t.perf, pe)
		}
		t.addProbe(Probe{Kind: "perf_event", Target: need.Name})
	}
	return nil
}

// Capabilities reports the path each capability took in this run (after
// attaching: a path that failed to attach is NA with its error).
func (t *Tracer) Capabilities() []CapStatus {
	out := make([]CapStatus, len(t.caps))
	for i := range t.caps {
		out[i] = t.caps[i].CapStatus
	}
	return out
}

// usesPath says whether the capability took the path of that index.
func (t *Tracer) usesPath(name string, index int) bool {
	for _, c := range t.caps {
		if c.Name == name && c.path != nil {
			return c.path == &c.cap.Paths[index]
		}
	}
	return false
}
