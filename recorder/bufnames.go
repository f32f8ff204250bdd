package recorder

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/internal/proc"
	"github.com/iocorr/iocorr/internal/procmaps"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/wire"
)

// unreadBufNames are the buffer-name records of the names the kernel
// still held unread at the run's end (bpf.Tracer.UnreadBufNames): a name
// whose page a thread had not mapped at its last ggml_backend_buffer_name
// return. Each is read from the file the run's maps snapshots (snaps,
// relative to the run directory dir) place its address in, as the probe
// would have read it from memory; one in no unwritable file mapping (a
// name on the heap, or one the process could have changed) is recorded
// with an empty name, which correlate takes for a buffer of no readable
// name. stamp is the records' time; unnamed says why each of those was
// not found.
func (s *session) unreadBufNames(dir string, snaps []rundir.MapsSnapshot, stamp uint64) (evs []wire.BufnameEvent, unnamed []string, err error) {
	pend, err := s.tr.UnreadBufNames()
	if len(pend) == 0 {
		return nil, nil, err
	}
	maps := readSnapshots(dir, snaps)
	for _, p := range pend {
		e := wire.BufnameEvent{Buffer: p.Buffer}
		e.Hdr.Ts, e.Hdr.Tid, e.Hdr.Type = stamp, p.Tid, uint16(wire.EventTypeEV_BUFNAME)
		name, pid, rerr := nameInFile(maps, p, len(e.Name))
		e.Hdr.Tgid = uint32(pid)
		if rerr != nil {
			unnamed = append(unnamed, fmt.Sprintf("buffer %#x of thread %d: %v", p.Buffer, p.Tid, rerr))
		}
		for i := range min(len(name), len(e.Name)-1) {
			e.Name[i] = int8(name[i])
		}
		evs = append(evs, e)
	}
	return evs, unnamed, err
}

// snapshotMaps is one maps snapshot, parsed.
type snapshotMaps struct {
	pid int
	ms  []procmaps.Mapping
}

// readSnapshots parses the run's maps snapshots, newest first; one that
// cannot be read is left out (the recording warned of it when it was
// taken, or it resolves nothing).
func readSnapshots(dir string, snaps []rundir.MapsSnapshot) []snapshotMaps {
	var out []snapshotMaps
	for _, s := range slices.Backward(snaps) {
		f, err := os.Open(filepath.Join(dir, s.File))
		if err != nil {
			continue
		}
		ms, err := procmaps.Parse(f)
		f.Close()
		if err == nil {
			out = append(out, snapshotMaps{pid: s.PID, ms: ms})
		}
	}
	return out
}

// nameInFile reads the NUL-terminated string at p.Name, of at most max-1
// bytes, from the file mapped there: in the thread's own process's
// snapshots when it is a process's main thread, else in every process's,
// which must then agree. pid is the process it was found in, 0 when none.
func nameInFile(maps []snapshotMaps, p bpf.UnreadBufName, max int) (name string, pid int, err error) {
	cands := slices.DeleteFunc(slices.Clone(maps), func(s snapshotMaps) bool { return s.pid != int(p.Tid) })
	if len(cands) == 0 {
		cands = maps
	}
	if len(cands) == 0 {
		return "", 0, errors.New("the run has no maps snapshot (none is taken before a process maps a model)")
	}
	var at *procmaps.Mapping
	for _, s := range cands {
		i := procmaps.Containing(s.ms, p.Name)
		if i < 0 {
			continue
		}
		m := &s.ms[i]
		if at != nil && (m.Path != at.Path || m.Inode != at.Inode || p.Name-m.Start+m.Offset != p.Name-at.Start+at.Offset) {
			return "", 0, fmt.Errorf("address %#x lies in %s in one process's maps and in %s in another's", p.Name, at.Path, m.Path)
		}
		if at == nil {
			at, pid = m, s.pid
		}
	}
	switch {
	case at == nil:
		return "", 0, fmt.Errorf("address %#x is in no mapping the maps snapshots show", p.Name)
	case at.Inode == 0 || !strings.HasPrefix(at.Path, "/"):
		return "", pid, fmt.Errorf("address %#x is in %q, no file", p.Name, at.Path)
	case strings.Contains(at.Perms, "w"):
		// A private writable mapping may differ from its file.
		return "", pid, fmt.Errorf("address %#x is in %s mapped %s: the file may not hold what the process read", p.Name, at.Path, at.Perms)
	case at.Deleted:
		return "", pid, fmt.Errorf("address %#x is in %s, deleted since", p.Name, at.Path)
	case procmaps.BackingOf(at.Name()) != procmaps.BackingFile:
		// A driver's device file or a memfd is never opened to read it.
		return "", pid, fmt.Errorf("address %#x is in %s, no regular file", p.Name, at.Path)
	}
	name, err = readCString(at, p.Name-at.Start+at.Offset, max)
	if err != nil {
		return "", pid, err
	}
	if name == "" {
		return "", pid, fmt.Errorf("the name at %#x (%s offset %d) is empty", p.Name, at.Path, p.Name-at.Start+at.Offset)
	}
	return name, pid, nil
}

// readCString reads the string at off of the file m maps, checking that
// the file is still the one mapped.
func readCString(m *procmaps.Mapping, off uint64, max int) (string, error) {
	f, err := os.Open(m.Path)
	if err != nil {
		return "", fmt.Errorf("reading the name from %s: %w", m.Path, err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return "", fmt.Errorf("reading the name from %s: %w", m.Path, err)
	}
	if st.Ino != m.Inode || unix.Major(st.Dev) != m.Major || unix.Minor(st.Dev) != m.Minor {
		return "", fmt.Errorf("%s is no longer the file the process mapped (inode %d, mapped %d)", m.Path, st.Ino, m.Inode)
	}
	b := make([]byte, max)
	n, err := f.ReadAt(b, int64(off))
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("reading the name from %s at %d: %w", m.Path, off, err)
	}
	b = b[:n]
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return string(b[:i]), nil
	}
	// As bpf_probe_read_user_str: cut to what fits with its NUL.
	return string(b[:min(len(b), max-1)]), nil
}

// takeUnreadBufNames appends, after the ring's last record, the names of
// the buffers the kernel still held unread (session.unreadBufNames), and
// warns of those it could not find.
func (r *recording) takeUnreadBufNames() {
	r.mu.Lock()
	snaps := slices.Clone(r.m.Maps)
	r.mu.Unlock()
	evs, unnamed, err := r.sess.unreadBufNames(r.o.Dir, snaps, proc.MonotonicNS())
	if err != nil {
		r.warn(err.Error() + ": weights in those buffers have no device")
	}
	for i := range evs {
		if err := r.spool.append(wire.EventTypeEV_BUFNAME, ingest.Bytes(&evs[i])); err != nil {
			r.warn(fmt.Sprintf("%d buffer names read at the end are missing: %v", len(evs)-i, err))
			return
		}
	}
	if len(unnamed) > 0 {
		r.warn(fmt.Sprintf("%d buffer names were unreadable in the process at every ggml_backend_buffer_name return and could not be read from a file at the end; their weights' device is [unnamed buffer]: %s", len(unnamed), strings.Join(unnamed, "; ")))
	}
}
