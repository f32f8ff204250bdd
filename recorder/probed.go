package recorder

import (
	"strings"
	"sync"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/rundir"
)

// probedFiles is what the recording learns of the files it probes and
// the maps it snapshots: the files searched for llama/ggml symbols, each
// probed library's build id (read once a file, as meta.json is rewritten
// often), and how many maps snapshots there are (their file names). The
// attach, the drain goroutine and the metadata writer use it at once.
type probedFiles struct {
	mu       sync.Mutex
	searched []string
	mapsN    int
	libs     map[string]rundir.Library
	// info reads a library's facts: libraryInfo, or a test's count.
	info func(path string) rundir.Library
}

func newProbedFiles() *probedFiles {
	return &probedFiles{libs: map[string]rundir.Library{}, info: libraryInfo}
}

// search notes a file inspected for llama/ggml symbols.
func (p *probedFiles) search(path string) {
	p.mu.Lock()
	p.searched = append(p.searched, path)
	p.mu.Unlock()
}

// searchedFiles are the files inspected so far, in order, as a copy.
func (p *probedFiles) searchedFiles() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.searched...)
}

// nextMaps numbers the next maps snapshot, from 1.
func (p *probedFiles) nextMaps() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mapsN++
	return p.mapsN
}

// libraries are the files a user probe attached to, each once, in the
// probes' order, with their build ids.
func (p *probedFiles) libraries(probes []bpf.Probe) []rundir.Library {
	var out []rundir.Library
	seen := map[string]bool{}
	for _, pr := range probes {
		if !(strings.HasPrefix(pr.Kind, "uprobe") || pr.Kind == "uretprobe") || pr.Error != "" || seen[pr.Target] {
			continue
		}
		seen[pr.Target] = true
		out = append(out, p.library(pr.Target))
	}
	return out
}

// library is path's facts, read the first time only.
func (p *probedFiles) library(path string) rundir.Library {
	p.mu.Lock()
	defer p.mu.Unlock()
	lib, ok := p.libs[path]
	if !ok {
		lib = p.info(path)
		p.libs[path] = lib
	}
	return lib
}
