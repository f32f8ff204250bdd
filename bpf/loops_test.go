package bpf

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// The capability table and the cut counts name the bounds the BPF C
// compiles in: a bound changed in one place only would be misreported.
func TestTheLoopBoundsAreTheBPFSources(t *testing.T) {
	for _, tc := range []struct {
		file, name string
		want       int
	}{
		{"ggml.bpf.h", "GRAPH_WALK_BOUND", GraphWalkBound},
		{"ggml.bpf.h", "EXPERT_CHUNK_BOUND", ExpertChunkBound},
		{"iocorr.h", "IOCORR_MAX_EXPERT_IDS", maxExpertIDs},
	} {
		src, err := os.ReadFile(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("#define %s %d\n", tc.name, tc.want); !strings.Contains(string(src), want) {
			t.Errorf("%s does not say %q", tc.file, strings.TrimSpace(want))
		}
	}
}
