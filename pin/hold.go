//go:build linux

package pin

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/internal/launch"
	"github.com/iocorr/iocorr/internal/pagecache"
)

// holderEnv marks the re-executed iocorr that is a holder.
const holderEnv = "IOCORR_PIN_HOLDER"

// request is what the holder is asked to lock.
type request struct {
	Path  string     `json:"path"`
	Spans [][2]int64 `json:"spans"`
}

// RunHolderIfChild must be called first in main (and in TestMain of a
// test binary that pins): in a holder it locks what it is asked to and
// holds it until its stdin closes, then exits.
func RunHolderIfChild() {
	if !launch.IsHelper(holderEnv) {
		return
	}
	in := bufio.NewReader(os.Stdin)
	line, err := in.ReadBytes('\n')
	if err != nil {
		fmt.Printf("error: reading the request: %v\n", err)
		os.Exit(1)
	}
	var req request
	if err := json.Unmarshal(line, &req); err != nil {
		fmt.Printf("error: parsing the request: %v\n", err)
		os.Exit(1)
	}
	n, err := lock(req)
	if err != nil {
		fmt.Printf("error: %v\n", strings.ReplaceAll(err.Error(), "\n", " "))
		os.Exit(1)
	}
	fmt.Printf("locked %d anon %d\n", n, anonBytes())
	// Held until the parent closes stdin (or dies): exit unlocks.
	_, _ = io.Copy(io.Discard, in)
	os.Exit(0)
}

// lock maps the file and locks the spans' pages. Each span is first
// dropped from the page cache where it is clean and unmapped, so that its
// pages are read again here and charged to this process's memory cgroup
// (a page already cached stays charged to the cgroup that read it).
func lock(req request) (int64, error) {
	f, err := os.Open(req.Path)
	if err != nil {
		return 0, fmt.Errorf("opening %s: %w", req.Path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if st.Size() == 0 {
		return 0, fmt.Errorf("%s is empty", req.Path)
	}
	// Dirty pages stay through DONTNEED (a model just written): write
	// them first.
	_ = unix.Fdatasync(int(f.Fd()))
	// DONTNEED drops only folios wholly inside its range, and the page
	// cache holds a file in folios of up to 2 MiB (a PMD): the range is
	// widened to 2 MiB boundaries, or a span inside a large folio would
	// stay charged to whoever read it first.
	const folio = 2 << 20
	for _, s := range req.Spans {
		a := s[0] / folio * folio
		_ = unix.Fadvise(int(f.Fd()), a, (s[0]+s[1]+folio-1)/folio*folio-a, unix.FADV_DONTNEED)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, fmt.Errorf("mapping %s: %w", req.Path, err)
	}
	const ps = kernel.PageSize
	for _, s := range req.Spans {
		a, b := s[0]/ps*ps, min((s[0]+s[1]+ps-1)/ps*ps, st.Size())
		if a < 0 || a >= b {
			return 0, fmt.Errorf("range %d+%d lies outside %s", s[0], s[1], req.Path)
		}
		if err := unix.Mlock(mem[a:b]); err != nil {
			if errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EAGAIN) {
				return 0, fmt.Errorf("mlock of %d bytes refused (%v): RLIMIT_MEMLOCK or the memory cgroup's limit is too small for the plan", PageBytes(req.Spans), err)
			}
			return 0, fmt.Errorf("mlock: %w", err)
		}
	}
	// mlock moves each folio to the unevictable list through its CPU's
	// batch; the holder sleeps from here on, so a batch left undrained
	// kept up to 15 locked folios out of the cgroup's unevictable count
	// while the command ran (the pin test saw one page short).
	if err := pagecache.DrainLRUBatches(); err != nil {
		return 0, err
	}
	return PageBytes(req.Spans), nil
}

// Holder is a running holder process.
type Holder struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	// Bytes is what it locked.
	Bytes int64
	// Anon is the holder's own anonymous memory once it has locked: it is
	// charged to the command's cgroup too, beside the pin.
	Anon int64
	// PID is its process id.
	PID int
}

// Hold starts a holder, lets place put it (into the command's memory
// cgroup) before it reads a byte, and returns once spans of path are
// locked. Release ends it.
func Hold(path string, spans [][2]int64, place func(pid int) error) (*Holder, error) {
	cmd, stdin, stdout, err := launch.StartHelper(holderEnv, "the holder", nil, place)
	if err != nil {
		return nil, err
	}
	h := &Holder{cmd: cmd, stdin: stdin, PID: cmd.Process.Pid}
	fail := func(err error) (*Holder, error) {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
		return nil, err
	}
	b, _ := json.Marshal(request{Path: path, Spans: spans})
	if _, err := stdin.Write(append(b, '\n')); err != nil {
		return fail(fmt.Errorf("asking the holder: %w", err))
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		return fail(fmt.Errorf("the holder ended before it locked the plan: %w", err))
	}
	line = strings.TrimSpace(line)
	if msg, ok := strings.CutPrefix(line, "error: "); ok {
		return fail(errors.New(msg))
	}
	if _, err := fmt.Sscanf(line, "locked %d anon %d", &h.Bytes, &h.Anon); err != nil {
		return fail(fmt.Errorf("the holder said %q", line))
	}
	return h, nil
}

// Release unlocks: the holder exits.
func (h *Holder) Release() error {
	h.stdin.Close()
	if err := h.cmd.Wait(); err != nil {
		return fmt.Errorf("the holder: %w", err)
	}
	return nil
}

// anonBytes is this process's RssAnon (/proc/self/status), 0 if unread.
func anonBytes() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "RssAnon:"); ok {
			var kib int64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kib); err == nil {
				return kib << 10
			}
		}
	}
	return 0
}
