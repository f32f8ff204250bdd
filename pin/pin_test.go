package pin_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/internal/launch"
	"github.com/iocorr/iocorr/pin"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/testenv"
)

// A pinning test re-executes this binary as the holder, and as the held
// child that becomes the command.
func TestMain(m *testing.M) {
	launch.RunShimIfChild()
	pin.RunHolderIfChild()
	os.Exit(m.Run())
}

// planFor is a plan of the model's first n tensors, whole, under budget.
func planFor(t *testing.T, model string, n int, budget int64) *pin.Plan {
	t.Helper()
	f, err := gguf.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	p, err := pin.WholeTensors(model, f.Tensors[:n], budget)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ownUnevictable is the unevictable bytes of this process's own memory
// cgroup (v1), where a pin must not land.
func ownUnevictable(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) == 3 && strings.Contains(","+f[1]+",", ",memory,") {
			st, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", f[2], "memory.stat"))
			if err != nil {
				t.Skipf("no v1 memory cgroup of our own to compare with: %v", err)
			}
			for _, sl := range strings.Split(string(st), "\n") {
				if f := strings.Fields(sl); len(f) == 2 && f[0] == "total_unevictable" {
					v, err := strconv.ParseUint(f[1], 10, 64)
					if err != nil {
						t.Fatal(err)
					}
					return v
				}
			}
		}
	}
	t.Skip("no v1 memory cgroup of our own to compare with")
	return 0
}

func TestThePinLandsInTheCommandsCgroupNotInIocorrs(t *testing.T) {
	testenv.RequireRoot(t)
	model := llmtest.Model(t, gguf.SynthSpec{Layers: 2, Embd: 256, FF: 512, Heads: 4})
	// Cached beforehand, as a model just used is: the pin must read its
	// pages again, charged to the command's cgroup.
	if _, err := os.ReadFile(model); err != nil {
		t.Fatal(err)
	}
	p := planFor(t, model, 4, 64<<20)
	before := ownUnevictable(t)
	var out bytes.Buffer
	res, err := pin.Run(t.Context(), pin.Options{Plan: p, Argv: []string{"cat", "/proc/self/cgroup"}, Stdout: &out, Stderr: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	if res.Pinned != p.Pinned {
		t.Errorf("the holder locked %d bytes, the plan's pages are %d", res.Pinned, p.Pinned)
	}
	// The command ran in the cgroup the pin was charged to.
	if !strings.Contains(out.String(), filepath.Base(res.Cgroup)) {
		t.Errorf("the command ran in\n%s\nnot in %s", out.String(), res.Cgroup)
	}
	key := map[int]string{1: "memory.stat.total_unevictable", 2: "memory.stat.unevictable"}[res.Version]
	if got := res.Counters[key]; got < uint64(p.Pinned) {
		t.Errorf("the command's cgroup counts %d unevictable bytes (%s), the pin is %d; its counters %v; the command said %s", got, key, p.Pinned, res.Counters, out.String())
	}
	if after := ownUnevictable(t); after > before+uint64(p.Pinned)/2 {
		t.Errorf("iocorr's own cgroup's unevictable bytes went from %d to %d: the pin landed there", before, after)
	}
}

func TestAPlanThatCannotBePinnedIsRefusedAndStartsNothing(t *testing.T) {
	testenv.RequireRoot(t)
	model := llmtest.Model(t, gguf.SynthSpec{Layers: 2, Embd: 256, FF: 512, Heads: 4})
	other := llmtest.Model(t, gguf.SynthSpec{Layers: 3, Embd: 256, FF: 512, Heads: 4})
	big := planFor(t, model, 4, 64<<20)
	forOther := planFor(t, model, 4, 64<<20)
	otherID, err := pin.IdentifyFile(other)
	if err != nil {
		t.Fatal(err)
	}
	forOther.Model = otherID
	forOther.Model.Path = model // names one file, holds another's identity
	for _, tc := range []struct {
		name  string
		plan  *pin.Plan
		limit int64
		want  string
	}{
		{"larger than the budget", big, big.Pinned - 4096, "more than the budget"},
		{"for another model", forOther, 0, "another model"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "ran")
			_, err := pin.Run(t.Context(), pin.Options{Plan: tc.plan, MemLimit: tc.limit, Argv: []string{"touch", marker}, Stdout: os.Stdout, Stderr: os.Stderr})
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("got %v, want one line saying %q", err, tc.want)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Error("the command ran")
			}
		})
	}
}
