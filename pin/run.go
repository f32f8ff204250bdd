//go:build linux

package pin

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/internal/cgroup"
	"github.com/iocorr/iocorr/internal/launch"
	"github.com/iocorr/iocorr/internal/proc"
)

// Check says why plan cannot be pinned under limit bytes for the model
// file it names, as one line; nil when it can. It refuses a plan for
// another file (size, GGUF tensor table), one larger than the budget, and
// one that RLIMIT_MEMLOCK would refuse to lock.
func Check(plan *Plan, limit int64) error {
	id, err := IdentifyFile(plan.Model.Path)
	if err != nil {
		return err
	}
	if why := plan.Matches(id); why != "" {
		return fmt.Errorf("refusing the plan: %s", why)
	}
	pinned := PageBytes(plan.Spans())
	if limit > 0 && pinned > limit {
		return fmt.Errorf("refusing the plan: it pins %d bytes, more than the budget of %d bytes", pinned, limit)
	}
	if pinned > 0 && !canIPCLock() {
		var rl unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl); err == nil && rl.Cur != unix.RLIM_INFINITY && rl.Cur < uint64(pinned) {
			return fmt.Errorf("refusing the plan: it locks %d bytes and RLIMIT_MEMLOCK allows %d (raise it with ulimit -l, or run as root)", pinned, rl.Cur)
		}
	}
	return nil
}

// canIPCLock says whether this process has CAP_IPC_LOCK, which lifts
// RLIMIT_MEMLOCK.
func canIPCLock() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<unix.CAP_IPC_LOCK) != 0
		}
	}
	return false
}

// Options are `iocorr pin`'s.
type Options struct {
	Plan *Plan
	// MemLimit is the command's budget; 0 takes the plan's.
	MemLimit int64
	Argv     []string
	User     *proc.User
	Stdout   io.Writer
	Stderr   io.Writer
}

// Result is how a pinned run went.
type Result struct {
	Exit launch.Exit
	// Pinned is what the holder locked; Cgroup the cgroup's path, version
	// and its counters at the command's end (memory.stat with the pinned
	// pages in it).
	Pinned     int64
	HolderAnon int64
	Cgroup     string
	Version    int
	Counters   map[string]uint64
}

// Run pins the plan's ranges in a new memory cgroup of the budget, runs
// the command in the same cgroup, and unlocks them when it has ended.
// A plan that cannot be pinned starts nothing.
func Run(ctx context.Context, o Options) (*Result, error) {
	limit := o.MemLimit
	if limit <= 0 {
		limit = o.Plan.Budget
	}
	if err := Check(o.Plan, limit); err != nil {
		return nil, err
	}
	cg, err := cgroup.NewMemory(cgroup.Name(os.Getpid()), limit)
	if err != nil {
		return nil, fmt.Errorf("refusing the plan: no memory cgroup to pin it in: %w", err)
	}
	defer cg.Remove()
	res := &Result{Cgroup: cg.Path, Version: cg.Version}
	var h *Holder
	if spans := o.Plan.Spans(); len(spans) > 0 {
		if h, err = Hold(o.Plan.Model.Path, spans, cg.Add); err != nil {
			return nil, fmt.Errorf("refusing the plan: %w", err)
		}
		res.Pinned, res.HolderAnon = h.Bytes, h.Anon
	}
	res.Exit, err = launch.RunHeld(ctx, o.Argv, o.User, o.Stdout, o.Stderr, cg.Add)
	// With the holder still in it: memory.stat's unevictable bytes are
	// the pin, charged here.
	res.Counters = cg.Counters()
	if h != nil {
		if rerr := h.Release(); rerr != nil && err == nil {
			err = rerr
		}
	}
	return res, err
}
