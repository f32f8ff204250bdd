package recorder

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/internal/proc"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/wire"
)

// snapshotDuty bounds the share of wall time the recorder spends taking
// residency snapshots: after a snapshot that took d, the next waits until
// snapshotDuty×d has passed. A snapshot walks every page of the models
// (about 10 ms for 326 MiB on a 2-vCPU VM under a memory limit, mincore
// or cachestat alike, see residency_pages.go), and on a machine whose
// CPUs the command keeps busy each of its milliseconds is one the command
// waits for: at 2% the snapshots were a quarter of the recorder's CPU on
// a cold 16-token run, and that CPU, 4-5% of the command's, is what
// tracing costs there (issue 33). At 1% a token of hundreds of ms gets
// its snapshot every two or three tokens; in RAM, where a token takes a
// few ms, one token in many does, and nothing changes.
const snapshotDuty = 100

// While every model stays wholly resident (a run in RAM), a snapshot only
// says so again, at the cost of its walk of every page (0.6 ms for a
// 326 MiB model), and took 2% of a CPU the traced threads wanted: the
// wait after such a snapshot doubles from wholeBackoffMin up to
// wholeBackoffMax, and drops back to the duty's as soon as a snapshot
// finds a page missing.
const (
	wholeBackoffMin = 50 * time.Millisecond
	wholeBackoffMax = time.Second
)

// snapshotter takes the page-cache residency of the model files at token
// starts, in the recorder: cachestat(2) of its own descriptor, with mincore
// of its own read-only mapping of each model for the chunks partly
// resident (cachestatPages), or mincore alone where the kernel has no cachestat
// (neither brings anything in nor pins it), on its own goroutine,
// so that neither the traced process nor the ring's reader waits for it.
// It learns of a token start from the ring (the drain goroutine calls
// mark), so a snapshot follows its token's start by the ring's latency
// and its own walk — unless the kernel held the process at that start
// (exact snapshots, Options.ExactSnapshots), which the snapshot resumes.
type snapshotter struct {
	models *models
	warn   func(string)
	f      *os.File
	w      *bufio.Writer
	marks  chan tokenMark
	done   chan struct{}
	maps   map[string]*modelMapping

	stats snapCounts
	// exact: the kernel stops each process at its token's start and the
	// snapshot resumes it once taken (Options.ExactSnapshots); released
	// counts the stops resumed by process, against the kernel's count.
	exact    bool
	tokens   func(tgid uint32) (uint64, uint32, error)
	cont     func(tgid int)
	released map[uint32]uint64
	// arm asks the kernel to wake the ring's reader at the next token
	// start (bpf.Tracer.ArmTokenWakeup), once the snapshotter is ready
	// for it: the reader polls only every 100 ms.
	arm     func() error
	armOnce sync.Once
	// armMu orders armNext (timers of the snapshot goroutine) before the
	// stop: none arms a tracer that is being closed.
	armMu   sync.Mutex
	stopped bool
	// armedAt is when (CLOCK_MONOTONIC ns) the pending wakeup was armed,
	// 0 when none is: the first token start after it takes it. timer
	// arms the next at the end of the duty's wait.
	armedAt atomic.Uint64
	timer   *time.Timer
	// flush puts the pending page-cache runs into the ring after each
	// snapshot (Snapshot.FlushedNS); nil where the tier keeps none.
	flush func() error
	// method is how the snapshots read residency: cachestat until the
	// kernel refuses it, then mincore (the snapshot goroutine's alone).
	method string
	// err is touched by the snapshot goroutine only, read after done.
	err error
}

// snapCounts are rundir.SnapshotStats as they grow: the drain goroutine
// counts replaced marks, the snapshot goroutine the rest.
type snapCounts struct{ Taken, Throttled, Replaced, BusyNS, NotHeld atomic.Uint64 }

func (c *snapCounts) export() rundir.SnapshotStats {
	return rundir.SnapshotStats{Taken: c.Taken.Load(), Throttled: c.Throttled.Load(), Replaced: c.Replaced.Load(), BusyNS: c.BusyNS.Load(), NotHeld: c.NotHeld.Load()}
}

type tokenMark struct {
	token  uint32
	tgid   uint32
	ts     uint64
	decode bool // a call of one token: predict's non-file memory is read at these
}

// modelMapping is a model opened for its snapshots: the descriptor for
// cachestat, and the mapping mincore reads (never touched, so it faults
// nothing in).
type modelMapping struct {
	f   *os.File
	mem []byte
	vec []byte
	err error
	// chunks: what its last snapshot found of each chunk.
	chunks []chunkState
}

// snapshotTracer is what the snapshots need of the tracer.
type snapshotTracer interface {
	// TokenStops is a process's count of stops at token starts and the
	// token of its last (exact snapshots).
	TokenStops(tgid uint32) (uint64, uint32, error)
	// ArmTokenWakeup asks the kernel to wake the ring's reader at the
	// next token start.
	ArmTokenWakeup() error
	// KeepsPageRuns says whether the kernel keeps page-cache runs
	// pending (the pagecache tier), FlushPageRuns puts them into the ring.
	KeepsPageRuns() bool
	FlushPageRuns() error
}

// startSnapshots opens DIR/residency.jsonl and starts the snapshots of
// the models' residency at token starts. With exact, the kernel stops
// each process at its token's start and cont resumes it once its
// snapshot is taken.
func startSnapshots(dir string, ms *models, warn func(string), tr snapshotTracer, exact bool, cont func(pid int)) (*snapshotter, error) {
	f, err := os.Create(filepath.Join(dir, rundir.ResidencyFile))
	if err != nil {
		return nil, fmt.Errorf("residency snapshots: %w", err)
	}
	s := &snapshotter{models: ms, warn: warn, f: f, w: bufio.NewWriter(f),
		marks: make(chan tokenMark, 1), done: make(chan struct{}), maps: map[string]*modelMapping{}}
	if tr.KeepsPageRuns() {
		s.flush = tr.FlushPageRuns
	}
	if exact {
		// Every token start is held for its snapshot: none is replaced or
		// throttled, and marks of several processes queue.
		s.exact = true
		s.marks = make(chan tokenMark, 64)
		s.tokens = tr.TokenStops
		s.cont = cont
		s.released = map[uint32]uint64{}
	} else {
		s.arm = tr.ArmTokenWakeup
	}
	s.armNext()
	go s.run()
	return s, nil
}

// armNext arms the wakeup at the next token start; a failure is said
// once, and leaves the snapshots to the reader's poll.
func (s *snapshotter) armNext() {
	s.armMu.Lock()
	defer s.armMu.Unlock()
	if s.arm == nil || s.stopped {
		return
	}
	s.armedAt.Store(proc.MonotonicNS())
	if err := s.arm(); err != nil {
		s.armOnce.Do(func() {
			s.warn(fmt.Sprintf("residency snapshots: %v; they follow their tokens by up to the ring reader's poll", err))
		})
	}
}

// mark hands a token start seen in the ring to the snapshotter. By
// default it never blocks the drain: a mark still pending when the next
// arrives is replaced (that token gets no snapshot, and the run counts
// it). Exact snapshots queue every mark (their processes wait for them),
// and block the drain only past 64 pending, which needs as many traced
// processes at a token start at once.
func (s *snapshotter) mark(e *wire.DecodeEvent) {
	if e.Hdr.Type != uint16(wire.EventTypeEV_DECODE_BEGIN) {
		return
	}
	m := tokenMark{token: e.Hdr.Token, tgid: e.Hdr.Tgid, ts: e.BeginTs, decode: event.PhaseOfBatch(e.N_tokens) == event.PhaseDecode}
	if m.ts == 0 {
		m.ts = e.Hdr.Ts
	}
	if s.exact {
		// Its process waits for this snapshot: never dropped.
		s.marks <- m
		return
	}
	for {
		select {
		case s.marks <- m:
			return
		default:
		}
		select {
		case <-s.marks:
			s.stats.Replaced.Add(1)
		default:
		}
	}
}

// stop ends the snapshots and says what they did.
func (s *snapshotter) stop() rundir.SnapshotStats {
	s.armMu.Lock()
	s.stopped = true
	s.armMu.Unlock()
	close(s.marks)
	<-s.done
	for _, m := range s.maps {
		if m.mem != nil {
			unix.Munmap(m.mem)
		}
		if m.f != nil {
			m.f.Close()
		}
	}
	if err := s.w.Flush(); err != nil && s.err == nil {
		s.err = err
	}
	if err := s.f.Close(); err != nil && s.err == nil {
		s.err = err
	}
	if s.err != nil {
		s.warn(fmt.Sprintf("residency snapshots: %v; the run's snapshots end there", s.err))
	}
	st := s.stats.export()
	st.Method = s.method
	st.Exact = s.exact
	if !s.exact {
		st.DutyShare = 1.0 / snapshotDuty
	}
	return st
}

func (s *snapshotter) run() {
	defer close(s.done)
	// nextAt is when (CLOCK_MONOTONIC ns, as the marks' starts) the duty's
	// wait after the last snapshot ends. A mark is judged by its token's
	// start, not by when the reader saw it: a token that started inside
	// the wait took no wakeup and may be seen a poll later, after the
	// wait, and a snapshot then would trail its start by that poll.
	var nextAt uint64
	var backoff time.Duration
	// The first decode token's start is never throttled: predict reads
	// the command's non-file memory at decode token starts, and a short
	// cold run's prefill snapshot kept every decode start of its few
	// tokens inside the duty's wait (the bench's short mode: no figure).
	decodeTaken := false
	for m := range s.marks {
		held := s.held(m)
		if s.err != nil {
			s.resume(held, m)
			continue
		}
		if throttled(m, nextAt, s.exact, decodeTaken) {
			s.stats.Throttled.Add(1)
			if at := s.armedAt.Load(); !decodeTaken || (at != 0 && m.ts >= at) {
				// This start took the pending wakeup (the timer armed it a
				// little before the wait's end, or the first decode start
				// wants one): the next start is woken too.
				s.armNext()
			}
			continue
		}
		decodeTaken = decodeTaken || m.decode
		if s.timer != nil {
			s.timer.Stop()
		}
		s.armedAt.Store(0)
		begin, beginNS := time.Now(), proc.MonotonicNS()
		snap, whole := s.take(m)
		snap.Held = held
		s.resume(held, m)
		if s.exact && !held {
			s.stats.NotHeld.Add(1)
		}
		took := time.Since(begin)
		var wait time.Duration
		wait, backoff = snapshotWait(took, backoff, whole)
		nextAt = beginNS + uint64(wait)
		if decodeTaken {
			// Armed before the wait's end, so that a start just after it
			// is woken whatever the timer's own lag; a start before the
			// end takes that wakeup, is throttled, and re-arms.
			s.timer = time.AfterFunc(time.Until(begin.Add(wait-armLead)), s.armNext)
		} else {
			// The first decode start is snapshotted within the wait: the
			// reader is woken at it, not at its next poll (the replay
			// test holds the snapshots' lag to the wakeup's).
			s.armNext()
		}
		s.stats.Taken.Add(1)
		s.stats.BusyNS.Add(uint64(took))
		b, err := json.Marshal(&snap)
		if err == nil {
			_, err = s.w.Write(append(b, '\n'))
		}
		if err == nil {
			err = s.w.Flush()
		}
		s.err = err
	}
	if s.timer != nil {
		s.timer.Stop()
	}
}

// armLead is how long before the duty's wait ends the next wakeup is
// armed: more than a timer's usual lag, so that no token start after
// the wait goes unwoken.
const armLead = 5 * time.Millisecond

// throttled says whether mark m gets no snapshot: its token started
// before nextAt (CLOCK_MONOTONIC ns), the duty's wait after the last,
// unless its process waits for it (exact) or it is the first decode
// token's (decodeTaken says one was taken).
func throttled(m tokenMark, nextAt uint64, exact, decodeTaken bool) bool {
	return !exact && m.ts < nextAt && (decodeTaken || !m.decode)
}

// snapshotWait is how long after the start of a snapshot that took took
// the next may start, and the back-off to carry: the duty's share of the
// time, or the back-off while every model stays wholly resident.
func snapshotWait(took, backoff time.Duration, whole bool) (time.Duration, time.Duration) {
	switch {
	case !whole:
		backoff = 0
	case backoff == 0:
		backoff = wholeBackoffMin
	default:
		backoff = min(2*backoff, wholeBackoffMax)
	}
	return max(snapshotDuty*took, backoff), backoff
}

// held says whether the kernel stopped mark m's process at that token's
// start (exact snapshots): its last stop is of this token, and not yet
// resumed. A stop it could not send (a ring over half full) leaves the
// token unheld, and a later stop is resumed at its own token, never early.
func (s *snapshotter) held(m tokenMark) bool {
	if !s.exact {
		return false
	}
	n, token, err := s.tokens(m.tgid)
	if err != nil {
		s.warn(err.Error())
		return false
	}
	return n > s.released[m.tgid] && token == m.token
}

// resume lets a held process run on.
func (s *snapshotter) resume(held bool, m tokenMark) {
	if !held {
		return
	}
	s.released[m.tgid]++
	s.cont(int(m.tgid))
}

// take is one snapshot of every model known now, and whether every one
// of them was wholly resident.
func (s *snapshotter) take(m tokenMark) (snap rundir.Snapshot, whole bool) {
	files := s.models.files()
	snap = rundir.Snapshot{Token: m.token, MarkNS: m.ts, Models: make([]*rundir.PageMap, len(files))}
	snap.StartNS = proc.MonotonicNS()
	whole = len(files) > 0
	for i := range files {
		pm := s.resident(&files[i])
		snap.Models[i] = pm
		whole = whole && pm != nil && pm.Resident*kernel.PageSize >= files[i].Size
	}
	snap.EndNS = proc.MonotonicNS()
	// The page-cache events up to here go to the ring now, each stamped
	// no later than its flush: a replay of them is then exact at
	// FlushedNS too, a few milliseconds after the token's start, where
	// the next exact point would be the next token's start.
	if s.flush == nil {
		return snap, whole
	}
	if err := s.flush(); err != nil {
		s.warn(err.Error() + ": a residency snapshot's page-cache events are not flushed after it")
	} else {
		snap.FlushedNS = proc.MonotonicNS()
	}
	return snap, whole
}

// resident is one model's resident pages, nil when they cannot be read:
// through cachestat(2) and mincore of the chunks partly resident while
// the kernel has cachestat, else through mincore alone, of a
// read-only mapping of the model (made at its first snapshot).
func (s *snapshotter) resident(mf *rundir.ModelFile) *rundir.PageMap {
	mm := s.maps[mf.Path]
	if mm == nil {
		mm = &modelMapping{}
		s.maps[mf.Path] = mm
		mm.f, mm.err = os.Open(mf.Path)
		if mm.err != nil {
			s.warn(fmt.Sprintf("model %s: no residency snapshots: %v", mf.Path, mm.err))
		}
	}
	if mm.err != nil {
		return nil
	}
	if mm.mem == nil && mf.Size > 0 {
		mm.mem, mm.err = unix.Mmap(int(mm.f.Fd()), 0, int(mf.Size), unix.PROT_READ, unix.MAP_SHARED)
		if mm.err != nil {
			s.warn(fmt.Sprintf("model %s: no residency snapshots: mapping it: %v", mf.Path, mm.err))
			return nil
		}
		mm.vec = make([]byte, len(mm.mem)/kernel.PageSize+1)
	}
	if s.method != methodMincore {
		if mm.chunks == nil {
			mm.chunks = newChunkStates(int64(len(mm.mem)), cachestatChunk)
		}
		pm, err := cachestatPages(mm.f, mm.mem, mm.vec, cachestatChunk, mm.chunks)
		if err == nil {
			s.method = methodCachestat
			return pm
		}
		if !errors.Is(err, errNoCachestat) {
			return nil
		}
		s.method = methodMincore
	}
	pm, err := mincorePages(mm.mem, mm.vec)
	if err != nil {
		return nil
	}
	return pm
}

// kernelCounts reads what the kernel counted instead of recording (the
// traced processes' filemap faults) while the tracer is open, and returns
// what puts it among the run's counts by type.
func (r *recording) kernelCounts() func(map[string]uint64) {
	if !r.sess.tr.CountsFilemapFaults() {
		return nil
	}
	n, err := r.sess.tr.FilemapFaults()
	if err != nil {
		r.warn(err.Error())
		return nil
	}
	return func(counts map[string]uint64) {
		counts[wire.EventTypeName(uint32(wire.EventTypeEV_FILEMAP_FAULT))] = n
	}
}
