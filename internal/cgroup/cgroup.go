// Package cgroup makes the memory cgroup of one run (v2 where the unified
// hierarchy offers the memory controller, else v1) and reads its counters.
package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Cgroup is a memory cgroup made for one run. A model larger than its
// limit cannot stay in the page cache, so llama.cpp re-reads weights from
// the disk: the situation SSD-offload studies look at.
type Cgroup struct {
	Path    string
	Version int
	Limit   int64
}

// cgroup roots and this process's cgroup membership, overridable in
// tests.
var (
	cgroupV2Roots = []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}
	cgroupV1Root  = "/sys/fs/cgroup/memory"
	procCgroup    = "/proc/self/cgroup"
)

// NewMemory creates a cgroup limited to limit bytes: v2 where the
// unified hierarchy offers the memory controller, else v1.
//
// It is made next to (v2) or inside (v1) iocorr's own cgroup rather than
// at the root, so that the command stays under every limit iocorr itself
// runs under (a container, a systemd slice, a CI job). v2 cannot nest it
// inside: a cgroup with processes of its own cannot give its children
// the memory controller.
func NewMemory(name string, limit int64) (*Cgroup, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("memory limit %d is not positive", limit)
	}
	v2, v1 := MemoryControllers()
	if root := v2; root != "" {
		parent := root
		if own := ownCgroup(""); own != "" && own != "/" {
			parent = filepath.Join(root, filepath.Dir(own))
		}
		// The controller must also be enabled for the parent's children;
		// where it already is, this write changes nothing.
		if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+memory"), 0o644); err != nil && parent != root {
			parent = root
			_ = os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+memory"), 0o644)
		}
		removeStale(parent)
		p := filepath.Join(parent, name)
		if err := os.Mkdir(p, 0o755); err != nil {
			return nil, fmt.Errorf("creating cgroup %s: %w", p, err)
		}
		cg := &Cgroup{Path: p, Version: 2, Limit: limit}
		if err := cg.write("memory.max", strconv.FormatInt(limit, 10)); err != nil {
			cg.Remove()
			return nil, err
		}
		// Swapping anonymous memory out would hide the page-cache effect
		// being measured.
		_ = cg.write("memory.swap.max", "0")
		return cg, nil
	}
	if !v1 {
		return nil, errors.New("no memory cgroup controller: neither cgroup v2 with memory nor v1 memory is mounted")
	}
	parent := cgroupV1Root
	if own := ownCgroup("memory"); own != "" {
		if _, err := os.Stat(filepath.Join(cgroupV1Root, own, "memory.limit_in_bytes")); err == nil {
			parent = filepath.Join(cgroupV1Root, own)
		}
	}
	removeStale(parent)
	p := filepath.Join(parent, name)
	if err := os.Mkdir(p, 0o755); err != nil {
		return nil, fmt.Errorf("creating cgroup %s: %w", p, err)
	}
	cg := &Cgroup{Path: p, Version: 1, Limit: limit}
	if err := cg.write("memory.limit_in_bytes", strconv.FormatInt(limit, 10)); err != nil {
		cg.Remove()
		return nil, err
	}
	_ = cg.write("memory.swappiness", "0")
	return cg, nil
}

// MemoryControllers says where a memory cgroup can be made: the first
// cgroup v2 root whose unified hierarchy offers the memory controller (""
// if none), and whether the v1 memory hierarchy is mounted.
// NewMemoryCgroup takes v2 when it has both.
func MemoryControllers() (v2Root string, v1 bool) {
	for _, root := range cgroupV2Roots {
		if ctrl, err := os.ReadFile(filepath.Join(root, "cgroup.controllers")); err == nil && hasWord(string(ctrl), "memory") {
			v2Root = root
			break
		}
	}
	_, err := os.Stat(filepath.Join(cgroupV1Root, "memory.limit_in_bytes"))
	return v2Root, err == nil
}

// ownCgroup is this process's cgroup path in the v2 hierarchy (controller
// "") or in the v1 hierarchy holding that controller; "" if unknown.
func ownCgroup(controller string) string {
	b, err := os.ReadFile(procCgroup)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if controller == "" && f[0] == "0" && f[1] == "" {
			return f[2]
		}
		if controller != "" && hasWord(strings.ReplaceAll(f[1], ",", " "), controller) {
			return f[2]
		}
	}
	return ""
}

// Name is the cgroup name for a run whose child has pid pid: the
// pid lets a later run tell a cgroup left behind (iocorr was killed
// before it could clean up) from one in use.
func Name(pid int) string { return fmt.Sprintf("iocorr-%d", pid) }

// removeStale removes empty iocorr-PID cgroups whose process is gone.
func removeStale(root string) {
	dirs, _ := filepath.Glob(filepath.Join(root, "iocorr-*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "iocorr-"))
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(d, "cgroup.procs")); err == nil && len(strings.TrimSpace(string(b))) == 0 {
			os.Remove(d)
		}
	}
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

func (c *Cgroup) write(file, v string) error {
	if err := os.WriteFile(filepath.Join(c.Path, file), []byte(v), 0o644); err != nil {
		return fmt.Errorf("writing %s of cgroup %s: %w", file, c.Path, err)
	}
	return nil
}

// Add moves a process into the cgroup; do it before the process runs so
// that every page it brings in is charged.
func (c *Cgroup) Add(pid int) error {
	return c.write("cgroup.procs", strconv.Itoa(pid))
}

// Counters reads the cgroup's own view of the run: how often it hit the
// limit, its peak, and its fault counts.
func (c *Cgroup) Counters() map[string]uint64 {
	out := map[string]uint64{}
	readKV := func(file, prefix string, keys ...string) {
		b, err := os.ReadFile(filepath.Join(c.Path, file))
		if err != nil {
			return
		}
		want := map[string]bool{}
		for _, k := range keys {
			want[k] = true
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) == 2 && (len(want) == 0 || want[f[0]]) {
				if v, err := strconv.ParseUint(f[1], 10, 64); err == nil {
					out[prefix+f[0]] = v
				}
			}
		}
	}
	readOne := func(file string) {
		b, err := os.ReadFile(filepath.Join(c.Path, file))
		if err != nil {
			return
		}
		if v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
			out[file] = v
		}
	}
	if c.Version == 2 {
		readKV("memory.events", "memory.events.")
		readOne("memory.peak")
		readKV("memory.stat", "memory.stat.", "pgfault", "pgmajfault", "file", "anon", "workingset_refault_file", "unevictable")
	} else {
		readOne("memory.failcnt")
		readOne("memory.max_usage_in_bytes")
		readKV("memory.stat", "memory.stat.", "pgfault", "pgmajfault", "total_cache", "total_rss", "pgpgin", "pgpgout", "total_unevictable")
	}
	return out
}

// Remove deletes the cgroup once its processes are gone. Processes that
// linger (a child's own children) are moved to the parent first, so that
// the directory can always be removed.
func (c *Cgroup) Remove() error {
	parent := filepath.Dir(c.Path)
	var err error
	for i := 0; i < 50; i++ {
		if b, rerr := os.ReadFile(filepath.Join(c.Path, "cgroup.procs")); rerr == nil {
			for _, pid := range strings.Fields(string(b)) {
				os.WriteFile(filepath.Join(parent, "cgroup.procs"), []byte(pid), 0o644)
			}
		}
		if err = os.Remove(c.Path); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("removing cgroup %s: %w", c.Path, err)
}
