package recorder

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/bpftest"
	"github.com/iocorr/iocorr/testkit/testenv"
)

// Each count the tracer kept lands in meta.json, and each one that says
// something was missed or read badly comes with its warning: never a
// silent zero, and no warning for a clean run.
func TestEndCountsGoToTheMetadataWithTheirWarnings(t *testing.T) {
	three := uint64(3)
	readFailed := errors.New("reading the map failed")
	cases := []struct {
		name       string
		c          endCounts
		unfinished uint64
		keeps      bool // the family keeps pauses
		wantLost   uint64
		want       rundir.Meta
		warnings   []string // substrings, in order
	}{
		{name: "a clean run says nothing",
			c:    endCounts{lost: map[string]uint64{"fault": 0}, requeues: new(uint64)},
			want: rundir.Meta{Lost: map[string]uint64{"fault": 0}, BlockRequeues: new(uint64)}},
		{name: "lost events are summed and said",
			c:        endCounts{lost: map[string]uint64{"fault": 2, "block": 5}, requeues: &three},
			wantLost: 7,
			want:     rundir.Meta{Lost: map[string]uint64{"fault": 2, "block": 5}, BlockRequeues: &three},
			warnings: []string{"7 events were lost"}},
		{name: "loops cut short on a kernel without bpf_loop",
			c:        endCounts{cut: bpf.LoopsCut{GraphNodes: 4, ExpertRows: 1}},
			want:     rundir.Meta{LoopsCut: &rundir.LoopsCut{GraphNodes: 4, ExpertRows: 1}},
			warnings: []string{"left 4 graph nodes unwalked and 1 token rows"}},
		{name: "pauses not taken, said only where the family keeps pauses",
			c: endCounts{stopsUnheld: 2}, keeps: true,
			warnings: []string{"2 pauses for a uprobe attach were not taken"}},
		{name: "pauses not taken and no pauses kept",
			c: endCounts{stopsUnheld: 2}},
		{name: "pauses not sent, said with or without a warden",
			c:        endCounts{stopsUnsent: 3},
			want:     rundir.Meta{PausesUnsent: 3},
			warnings: []string{"3 pauses for a uprobe attach could not be sent"}},
		{name: "page runs out of order",
			c:        endCounts{unorderedRuns: 9},
			want:     rundir.Meta{PageRunsUnordered: 9},
			warnings: []string{"9 page-cache runs reached the ring after"}},
		{name: "completions unseen and requests unfinished add up",
			c: endCounts{completionsUnseen: 2}, unfinished: 3,
			want:     rundir.Meta{BlockIncomplete: 5},
			warnings: []string{"5 block requests were recorded without their completion"}},
		{name: "a count that could not be read is said, not zero",
			c: endCounts{lostErr: readFailed, cutErr: readFailed, stopsUnheldErr: readFailed, stopsUnsentErr: readFailed, unorderedRunsErr: readFailed,
				requeues: &three, requeuesErr: readFailed, completionsUnseenErr: readFailed},
			unfinished: 3,
			warnings:   []string{readFailed.Error(), readFailed.Error(), readFailed.Error(), readFailed.Error(), readFailed.Error(), readFailed.Error(), readFailed.Error()}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var m rundir.Meta
			var handed uint64
			lost, warnings := tc.c.record(&m, tc.unfinished, func(n uint64) bool { handed = n; return tc.keeps })
			if lost != tc.wantLost {
				t.Errorf("lost = %d, want %d", lost, tc.wantLost)
			}
			if !reflect.DeepEqual(m, tc.want) {
				t.Errorf("meta = %+v, want %+v", m, tc.want)
			}
			if tc.c.stopsUnheld > 0 && tc.c.stopsUnheldErr == nil && handed != tc.c.stopsUnheld {
				t.Errorf("the family was handed %d unheld pauses, want %d", handed, tc.c.stopsUnheld)
			}
			if len(warnings) != len(tc.warnings) {
				t.Fatalf("warnings %q, want %d", warnings, len(tc.warnings))
			}
			for i, w := range tc.warnings {
				if !strings.Contains(warnings[i], w) {
					t.Errorf("warning %d = %q, want it to say %q", i, warnings[i], w)
				}
			}
		})
	}
}

// A session just opened has counted nothing, reads every count without
// an error, and closes once however often it is closed.
func TestSessionOpensCountsNothingAndClosesOnce(t *testing.T) {
	testenv.RequireBPF(t)
	var stderr bytes.Buffer
	s, err := openSession(&Options{Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	c := s.counts()
	var m rundir.Meta
	lost, warnings := c.record(&m, 0, func(uint64) bool { return true })
	if lost != 0 || len(warnings) != 0 {
		t.Errorf("a fresh session: %d lost, warnings %q", lost, warnings)
	}
	if m.BlockRequeues != nil && *m.BlockRequeues != 0 {
		t.Errorf("a fresh session counted %d requeues", *m.BlockRequeues)
	}
	s.close()
	s.close()
	if stderr.Len() != 0 {
		t.Errorf("closing twice said %q", stderr.String())
	}
}

// A --model that is no model stops the recording after the session
// opened: the command never runs, the run directory is finished and says
// why, with the session's counts read before it closed.
func TestRunWithAModelThatIsNoModelLeavesAFinishedRunSayingWhy(t *testing.T) {
	testenv.RequireBPF(t)
	notModel := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(notModel, []byte("no gguf here"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "run")
	mark := filepath.Join(t.TempDir(), "ran")
	o := options(dir, "touch", mark)
	o.Models = []string{notModel}
	res, err := Run(context.Background(), o)
	if err == nil || !strings.HasPrefix(err.Error(), "--model: ") {
		t.Fatalf("err = %v, want a --model error", err)
	}
	requireNotRunAndSaid(t, res, dir, mark, notModel)
}

// A capability the kernel's verifier took away at load is said once on
// stderr, with the verifier's reason and every capability it cost; an NA
// the kernel's features explain (doctor says those) or an option not
// asked for is not.
func TestAVerifierRefusalIsWarnedOnceWithItsReason(t *testing.T) {
	refused := bpf.VerifierRefused + "fault_major: permission denied: R1 invalid mem access 'scalar'"
	for _, tc := range []struct {
		name string
		caps []bpf.CapStatus
		want []string
	}{
		{"one refusal, two capabilities", []bpf.CapStatus{
			{Name: bpf.CapProcesses, Path: "tp_btf sched_process_fork"},
			{Name: bpf.CapFaults, Lost: "no user page fault is seen", Why: refused},
			{Name: bpf.CapOffsets, Lost: "faults are not charged to tensors", Why: refused},
		}, []string{refused + "; NA in this run: faults, fault offsets"}},
		{"two refusals", []bpf.CapStatus{
			{Name: bpf.CapFaults, Why: refused},
			{Name: bpf.CapPageCache, Why: bpf.VerifierRefused + "page_add: permission denied: combined stack size of 2 calls is 544. Too large"},
		}, []string{refused + "; NA in this run: faults", bpf.VerifierRefused + "page_add: permission denied: combined stack size of 2 calls is 544. Too large; NA in this run: page cache"}},
		{"absent from the kernel", []bpf.CapStatus{{Name: bpf.CapReadahead, Why: "tracepoint readahead/page_cache_ra_order: not in this kernel"}}, nil},
		{"not asked for", []bpf.CapStatus{{Name: bpf.CapSched, Off: true, Lost: "not asked for (--probe sched)"}}, nil},
		{"taken despite an earlier path's refusal", []bpf.CapStatus{{Name: bpf.CapFaults, Path: "perf page-faults", Why: refused}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := refusals(tc.caps); !slices.Equal(got, tc.want) {
				t.Errorf("refusals = %q, want %q", got, tc.want)
			}
		})
	}
}

// A program this kernel's verifier really refuses at load (bpftest's,
// through bpf.Options.LoadSpec: recorder reaches the loader only through
// openTracer's options) leaves a recording that runs its command and says
// the refusal once on stderr and once in meta.json's warnings, with the
// verifier's line and every capability it cost, which meta.json lists NA.
func TestARecordingWarnsAVerifierRefusalOnStderrAndInItsMetadata(t *testing.T) {
	testenv.RequireBPF(t)
	defer func(f func(bpf.Options) (*bpf.Tracer, error)) { openTracer = f }(openTracer)
	openTracer = func(o bpf.Options) (*bpf.Tracer, error) {
		o.LoadSpec = bpftest.RefusingSpec("fault_major")
		return bpf.Open(o)
	}
	dir := filepath.Join(t.TempDir(), "run")
	mark := filepath.Join(t.TempDir(), "ran")
	var stderr bytes.Buffer
	o := options(dir, "touch", mark)
	o.Stderr = &stderr
	if _, err := Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mark); err != nil {
		t.Fatalf("the command did not run: %v", err)
	}
	m, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	isRefusal := func(w string) bool {
		return strings.HasPrefix(w, bpf.VerifierRefused+"fault_major: ") && strings.Contains(w, "invalid bpf_context access") &&
			strings.HasSuffix(w, "; NA in this run: "+bpf.CapFaults+", "+bpf.CapOffsets+", "+bpf.CapFaultWait)
	}
	var inMeta []string
	for _, w := range m.Warnings {
		if isRefusal(w) {
			inMeta = append(inMeta, w)
		}
	}
	if len(inMeta) != 1 {
		t.Fatalf("meta.json's warnings %q: want the refusal once", m.Warnings)
	}
	if n := strings.Count(stderr.String(), "iocorr: warning: "+inMeta[0]+"\n"); n != 1 {
		t.Errorf("stderr says the refusal %d times, want once:\n%s", n, stderr.String())
	}
	for _, c := range m.Capabilities {
		if (c.Name == bpf.CapFaults || c.Name == bpf.CapOffsets || c.Name == bpf.CapFaultWait) && (c.Path != "" || !strings.HasPrefix(c.Why, bpf.VerifierRefused)) {
			t.Errorf("meta.json's %s: path %q, why %q; want NA for the refusal", c.Name, c.Path, c.Why)
		}
	}
}
