package recorder

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/iocorr/iocorr/rundir"
)

// runMeta is meta.json while the run is recorded: the metadata and its
// warnings under one lock, kept on disk by a writer of its own while the
// command runs (metaWriter), and disk space held back for the last write,
// so that a run that fills the disk still says what it captured.
type runMeta struct {
	dir    string
	stderr io.Writer // warnings are said there as they come
	writer *metaWriter
	// reserve is the file that holds the space back; "" once released.
	reserve string

	// mu guards m and warnings, which the writer snapshots while the
	// command runs.
	mu       sync.Mutex
	m        rundir.Meta
	warnings []string
}

// open writes the first metadata, as snap makes it, holds back the space
// for the last, and readies the writer (started by writer.start).
func (rm *runMeta) open(snap func() rundir.Meta) error {
	rm.writer = newMetaWriter(rm.dir, snap, func(err error) { fmt.Fprintf(rm.stderr, "iocorr: %v\n", err) })
	if err := rm.writer.writeNow(); err != nil {
		return err
	}
	rm.reserve = reserveSpace(rm.dir)
	return nil
}

// warn says s on stderr and keeps it among the run's warnings.
func (rm *runMeta) warn(s string) {
	rm.mu.Lock()
	rm.warnings = append(rm.warnings, s)
	rm.mu.Unlock()
	fmt.Fprintf(rm.stderr, "iocorr: warning: %s\n", s)
}

// warned reports whether a warning already says s.
func (rm *runMeta) warned(s string) bool {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	for _, w := range rm.warnings {
		if strings.Contains(w, s) {
			return true
		}
	}
	return false
}

// update changes the metadata under the lock the writer takes.
func (rm *runMeta) update(f func(m *rundir.Meta)) {
	rm.mu.Lock()
	f(&rm.m)
	rm.mu.Unlock()
}

// copyLocked is the metadata with its warnings, its slices its own;
// rm.mu is held.
func (rm *runMeta) copyLocked() rundir.Meta {
	m := rm.m
	m.Maps = append([]rundir.MapsSnapshot(nil), rm.m.Maps...)
	m.Warnings = append([]string(nil), rm.warnings...)
	return m
}

// final writes m as the run's last metadata and keeps it. The reserve
// goes first: on a full disk it is what meta.json fits in.
func (rm *runMeta) final(m rundir.Meta) {
	if rm.reserve != "" {
		os.Remove(rm.reserve)
		rm.reserve = ""
	}
	rm.mu.Lock()
	rm.m = m
	rm.mu.Unlock()
	if err := rundir.WriteMeta(rm.dir, &m); err != nil {
		fmt.Fprintf(rm.stderr, "iocorr: %v\n", err)
	}
}

// metaMinInterval is the least time between two writes of meta.json
// while the command runs.
const metaMinInterval = 250 * time.Millisecond

// metaWriter keeps meta.json current while the command runs. The drain
// goroutine only says that something changed; a goroutine of its own
// snapshots the metadata and writes it (atomically, by rename), so that
// reading the ring never waits for the disk. Changes that arrive while a
// write is under way are folded into the next one.
type metaWriter struct {
	dir   string
	snap  func() rundir.Meta
	fail  func(error)
	dirty chan struct{}
	quit  chan struct{}
	wg    sync.WaitGroup
	// failed keeps a write error from being reported at every change.
	failed bool
}

func newMetaWriter(dir string, snap func() rundir.Meta, fail func(error)) *metaWriter {
	return &metaWriter{dir: dir, snap: snap, fail: fail, dirty: make(chan struct{}, 1)}
}

// writeNow writes the metadata on the calling goroutine.
func (w *metaWriter) writeNow() error {
	m := w.snap()
	return rundir.WriteMeta(w.dir, &m)
}

// changed asks for a write; it never blocks.
func (w *metaWriter) changed() {
	select {
	case w.dirty <- struct{}{}:
	default:
	}
}

// start runs the writer until stop.
func (w *metaWriter) start() {
	w.quit = make(chan struct{})
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for {
			select {
			case <-w.quit:
				return
			case <-w.dirty:
				if err := w.writeNow(); err != nil && !w.failed {
					w.failed = true
					w.fail(err)
				}
				// Changes come in bursts (a library probed, its maps, the
				// layout checked, each a change): folded into one write
				// per metaMinInterval, they cost a cold run 8 ms of JSON
				// less, and a killed recorder's meta.json is that much
				// older at most.
				select {
				case <-w.quit:
					return
				case <-time.After(metaMinInterval):
				}
			}
		}
	}()
}

// stop waits for a write under way and ends the writer; the caller
// writes the final metadata itself.
func (w *metaWriter) stop() {
	if w.quit == nil {
		return
	}
	close(w.quit)
	w.wg.Wait()
	w.quit = nil
}
