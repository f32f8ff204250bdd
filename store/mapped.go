package store

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/iocorr/iocorr/internal/procmaps"
)

// badger reads its tables and value log through read-only shared
// mappings of the store's files, and every page a scan touches stays in
// the reader's resident set until the store closes: a reader of a whole
// run would grow with the store (its peak RSS held a copy of the 34 MB
// store of a 256-token run). A releaser drops the store's mapped pages
// from the resident set after every releaseEvery bytes a scan reads; they
// stay in the page cache, and a later read maps them again at a minor
// fault's cost. Nothing is lost: the mappings are read-only and shared,
// so MADV_DONTNEED only unmaps clean file pages.
//
// The writer's mappings (value log, memtable logs) are written: for a
// shared mapping the kernel moves a page's dirty bit to the page cache
// when it unmaps the page, so the write is kept and written back as any.
type releaser struct {
	dir      string // the store's directory, with a trailing slash
	writable bool   // release written mappings too (the writer's)
	n        int
}

// releaseEvery bounds the store's pages a reader holds.
const releaseEvery = 4 << 20

func newReleaser(dir string) *releaser {
	// The kernel names mapped files by absolute path.
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	return &releaser{dir: strings.TrimSuffix(dir, "/") + "/"}
}

// read counts n bytes read from the store, releasing its pages past the
// bound.
func (r *releaser) read(n int) {
	if r == nil {
		return
	}
	r.n += n
	if r.n >= releaseEvery {
		r.n = 0
		r.release()
	}
}

// release drops the resident pages of every read-only shared mapping of
// the store's files. A failure to read the process's maps only leaves the
// pages resident (memory, not results), so it is not reported.
func (r *releaser) release() {
	ms, err := procmaps.Read(os.Getpid())
	if err != nil {
		return
	}
	for _, m := range ms {
		if !m.Shared() || (strings.Contains(m.Perms, "w") && !r.writable) || !strings.HasPrefix(m.Path, r.dir) {
			continue
		}
		dropPages(uintptr(m.Start), uintptr(m.End-m.Start))
	}
}
