package recorder

import (
	"reflect"
	"sync"
	"testing"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/rundir"
)

// countingInfo stands in for libraryInfo to count its reads: a library's
// facts are read from its file, which the test cannot tell apart from a
// second read.
func countingInfo(reads map[string]int) func(string) rundir.Library {
	return func(path string) rundir.Library {
		reads[path]++
		return rundir.Library{Path: path, BuildID: "id-of-" + path}
	}
}

func TestProbedFilesLibrariesAreTheUserProbedFilesOnceInProbeOrder(t *testing.T) {
	tests := []struct {
		name   string
		probes []bpf.Probe
		want   []string
	}{
		{"none", nil, nil},
		{"uprobes and uretprobes, each file once", []bpf.Probe{
			{Kind: "uprobe", Target: "/lib/libllama.so", Symbol: "llama_decode"},
			{Kind: "uretprobe", Target: "/lib/libggml.so", Symbol: "ggml_graph_compute"},
			{Kind: "uprobe", Target: "/lib/libllama.so", Symbol: "llama_model_load"},
			{Kind: "uprobe_multi", Target: "/lib/libggml-cpu.so", Symbol: "ggml_compute_forward"},
		}, []string{"/lib/libllama.so", "/lib/libggml.so", "/lib/libggml-cpu.so"}},
		{"a probe that failed names no library", []bpf.Probe{
			{Kind: "uprobe", Target: "/lib/libllama.so", Symbol: "llama_decode", Error: "symbol not found"},
			{Kind: "uprobe", Target: "/bin/llama-cli", Symbol: "llama_decode"},
		}, []string{"/bin/llama-cli"}},
		{"kernel probes and file facts name none", []bpf.Probe{
			{Kind: "tracepoint", Target: "filemap/mm_filemap_fault"},
			{Kind: "perf_event", Target: "/lib/libggml.so"},
			{Kind: "elf", Target: "/lib/libggml.so"},
			{Kind: "capability", Target: "bpf_loop"},
		}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reads := map[string]int{}
			p := newProbedFiles()
			p.info = countingInfo(reads)
			// meta.json is rewritten many times a run: the files are
			// read the first time only.
			for range 3 {
				var got []string
				for _, lib := range p.libraries(tc.probes) {
					if lib.BuildID != "id-of-"+lib.Path {
						t.Errorf("library %s has build id %q", lib.Path, lib.BuildID)
					}
					got = append(got, lib.Path)
				}
				if !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("libraries %q, want %q", got, tc.want)
				}
			}
			for path, n := range reads {
				if n != 1 {
					t.Errorf("%s read %d times, want once", path, n)
				}
			}
		})
	}
}

func TestProbedFilesSearchedAreInOrderAndACopy(t *testing.T) {
	p := newProbedFiles()
	if got := p.searchedFiles(); len(got) != 0 {
		t.Fatalf("searched %q before any search", got)
	}
	p.search("/bin/llama-cli")
	p.search("/lib/libllama.so")
	got := p.searchedFiles()
	got[0] = "changed by the caller"
	if again := p.searchedFiles(); !reflect.DeepEqual(again, []string{"/bin/llama-cli", "/lib/libllama.so"}) {
		t.Fatalf("searched %q", again)
	}
}

// Maps snapshots are taken by the drain goroutine and the attach at once;
// each needs a file name of its own.
func TestProbedFilesNumberEachMapsSnapshotOnceFromOne(t *testing.T) {
	p := newProbedFiles()
	const workers, each = 4, 50
	got := make(chan int, workers*each)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				got <- p.nextMaps()
			}
		}()
	}
	wg.Wait()
	close(got)
	seen := map[int]bool{}
	for n := range got {
		if n < 1 || n > workers*each || seen[n] {
			t.Fatalf("snapshot number %d twice or out of 1..%d", n, workers*each)
		}
		seen[n] = true
	}
}
