package bpf

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/testenv"
)

// The table names programs of the object, and every kernel-side program of
// the object is in the table: one the table does not name would be loaded
// and never attached.
func TestTheCapabilityTableAndTheObjectNameTheSamePrograms(t *testing.T) {
	spec, err := LoadIocorr()
	if err != nil {
		t.Fatal(err)
	}
	inTable := map[string]bool{}
	for _, c := range Capabilities {
		for i := range c.Paths {
			for _, name := range c.Paths[i].programs() {
				inTable[name] = true
				if spec.Programs[name] == nil {
					t.Errorf("%s, path %q: no program %s in the object", c.Name, c.Paths[i].Name, name)
				}
			}
		}
	}
	for name, p := range spec.Programs {
		kernelSide := p.Type == ebpf.TracePoint || p.Type == ebpf.PerfEvent || (p.Type == ebpf.Tracing && p.AttachType == ebpf.AttachTraceRawTp)
		if kernelSide && !inTable[name] {
			t.Errorf("program %s (%s %s) is in no capability's path", name, p.Type, p.SectionName)
		}
	}
}

// fakeKernel is a detector whose answers are given: every feature is there
// except those in absent.
func fakeKernel(absent ...string) *detector {
	d := &detector{memo: map[string]error{}}
	for _, c := range Capabilities {
		for i := range c.Paths {
			for _, n := range c.Paths[i].Needs() {
				d.memo[n.String()] = nil
				if slices.ContainsFunc(absent, n.matches) {
					d.memo[n.String()] = errors.New("not in this kernel")
				}
			}
		}
	}
	return d
}

func TestEachCapabilityTakesTheFirstPathThisKernelHas(t *testing.T) {
	tests := []struct {
		name    string
		absent  []string
		without []string
		cap     string
		path    int // -1: NA
		why     string
	}{
		{"everything there: the primary path", nil, nil, CapFaults, 0, ""},
		{"arm64: no page_fault_user", []string{"page_fault_user"}, nil, CapFaults, 1, "tp_btf page_fault_user: not in this kernel"},
		{"5.15: no bpf_find_vma, offsets in user space", []string{"bpf_find_vma"}, nil, CapOffsets, 1, "helper bpf_find_vma: not in this kernel"},
		{"5.15: no bpf_find_vma, mmap from its fd", []string{"bpf_find_vma"}, nil, CapMappings, 1, "bpf_find_vma"},
		{"5.15: no bpf_loop, bounded loops", []string{"bpf_loop"}, nil, CapLoops, 1, "helper bpf_loop: not in this kernel"},
		{"before 5.3: no loop at all, nothing can be traced", []string{"bpf_loop", "bounded_loops"}, nil, CapLoops, -1, "verifier bounded_loops: not in this kernel"},
		{"before 6.6: plain uprobes", []string{"uprobe_multi"}, nil, CapOps, 1, "link uprobe_multi: not in this kernel"},
		{"no readahead tracepoints: the adds inside faults", []string{"readahead"}, nil, CapReadahead, 1, "tracepoint readahead/page_cache_sync_ra"},
		{"no page cache tracepoints: readahead NA too", []string{"filemap"}, nil, CapReadahead, -1, "tracepoint filemap/mm_filemap_add_to_page_cache"},
		{"no perf page-faults either: faults NA", []string{"page_fault_user", "page-faults"}, nil, CapFaults, -1, "perf_event page-faults"},
		{"switched off, not absent", nil, []string{"page_fault_user"}, CapFaults, 1, "switched off"},
		{"a group switched off", nil, []string{"syscalls"}, CapReads, -1, "tracepoint syscalls/sys_enter_read"},
		{"optional and not asked for", nil, nil, CapSched, -1, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := fakeKernel(tc.absent...)
			d.without = tc.without
			chs := choose(d, func(c *Capability) bool { return c.Name != CapSched })
			i := slices.IndexFunc(chs, func(c capChoice) bool { return c.Name == tc.cap })
			c := chs[i]
			switch {
			case tc.path < 0 && c.path != nil:
				t.Fatalf("%s took %q, want NA", tc.cap, c.Path)
			case tc.path >= 0 && c.path != &Capabilities[i].Paths[tc.path]:
				t.Fatalf("%s took %q (why: %s), want %q", tc.cap, c.Path, c.Why, Capabilities[i].Paths[tc.path].Name)
			}
			if c.Primary != (tc.path == 0) {
				t.Errorf("primary %v on path %d", c.Primary, tc.path)
			}
			if !strings.Contains(c.Why, tc.why) {
				t.Errorf("why %q, want it to say %q", c.Why, tc.why)
			}
			if tc.path != 0 && c.Lost == "" {
				t.Errorf("%s on path %d says nothing of what is lost", tc.cap, tc.path)
			}
			if tc.path < 0 && !c.Off && c.Lost != Capabilities[i].NA {
				t.Errorf("NA %s loses %q, want its NA reason %q", tc.cap, c.Lost, Capabilities[i].NA)
			}
		})
	}
}

func TestWithoutRejectsAFeatureItDoesNotKnow(t *testing.T) {
	tests := []struct {
		env     string
		opt     []string
		want    []string
		wantErr string
	}{
		{"", []string{"page_fault_user"}, []string{"page_fault_user"}, ""},
		{"bpf_find_vma, readahead", []string{"uprobe_multi"}, []string{"uprobe_multi", "bpf_find_vma", "readahead"}, ""},
		{"page_fault", nil, nil, `unknown kernel feature "page_fault"`},
	}
	for _, tc := range tests {
		t.Run(tc.env+strings.Join(tc.opt, ","), func(t *testing.T) {
			t.Setenv(WithoutEnv, tc.env)
			got, err := parseWithout(tc.opt)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// Each forced fallback loads and attaches on this kernel, takes the path
// it names, and only the programs of the paths taken are loaded.
func TestOpenTakesTheFallbackOfEachFeatureSwitchedOff(t *testing.T) {
	testenv.RequireBPF(t)
	tests := []struct {
		without []string
		cap     string
		path    int
		loaded  []string
		absent  []string
	}{
		{nil, CapFaults, 0, []string{"fault_begin", "fault_major"}, []string{"fault_begin_perf", "op_begin_multi", "op_begin", "sched_switch"}},
		{[]string{"page_fault_user"}, CapFaults, 1, []string{"fault_begin_perf", "fault_major"}, []string{"fault_begin"}},
		{[]string{"bpf_find_vma"}, CapOffsets, 1, []string{"vma_enter_mmap", "mmap_exit", "vma_enter_munmap", "vma_exit_munmap"}, []string{"vma_enter_mremap"}},
		{[]string{"readahead"}, CapReadahead, 1, nil, []string{"ra_sync", "ra_order"}},
		{[]string{"block_rq_issue"}, CapBlock, -1, nil, []string{"block_issue", "block_complete"}},
		{[]string{"bpf_loop", "bpf_find_vma", "page_fault_user"}, CapLoops, 1, []string{"page_add", "graph_compute", "get_rows_begin", "fault_begin_perf"}, nil},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.without, ","), func(t *testing.T) {
			tr := openTracer(t, Options{Without: tc.without, Probes: rundir.ProbeSet{PageCache: true}})
			caps := tr.Capabilities()
			i := slices.IndexFunc(caps, func(c CapStatus) bool { return c.Name == tc.cap })
			want := ""
			if tc.path >= 0 {
				want = Capabilities[i].Paths[tc.path].Name
			}
			if caps[i].Path != want {
				t.Errorf("%s took %q (why: %s), want %q", tc.cap, caps[i].Path, caps[i].Why, want)
			}
			named := slices.ContainsFunc(tr.Probes(), func(p Probe) bool { return p.Kind == "capability" && p.Target == tc.cap && p.Error != "" })
			if named != (tc.path < 0) {
				t.Errorf("%s on path %d: listed among the failed probes %v", tc.cap, tc.path, named)
			}
			for _, name := range tc.loaded {
				if tr.program(name) == nil {
					t.Errorf("program %s not loaded", name)
				}
			}
			for _, name := range tc.absent {
				if tr.program(name) != nil {
					t.Errorf("program %s loaded, though its path was not taken", name)
				}
			}
		})
	}
}
