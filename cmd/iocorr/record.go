package main

import (
	"context"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/experiment"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/rundir"
)

func init() {
	register(&command{
		name:    "record",
		summary: "run a command and trace which tensors cause its disk I/O",
		usage:   "[-o DIR] [flags] -- CMD [ARGS...]",
		flags:   recordFlags,
	})
}

type recordOpts struct {
	out        string
	force      bool
	probe      string
	libs       []string
	models     []string
	cold       bool
	dropCaches bool
	memLimit   string
	user       string
	noIngest   bool
	ringbuf    string
}

func recordFlags(fs *pflag.FlagSet) func(context.Context, []string) error {
	o := &recordOpts{}
	fs.StringVarP(&o.out, "output", "o", rundir.Default, "run directory to write")
	fs.BoolVarP(&o.force, "force", "f", false, "overwrite an existing run directory")
	fs.StringVar(&o.probe, "probe", "graph", "user-space probes: graph (one hit per graph) or ops (also every op, costlier)")
	fs.StringArrayVar(&o.libs, "lib", nil, "also attach uprobes to this ELF file (repeatable)")
	fs.StringArrayVar(&o.models, "model", nil, "a model file to trace (repeatable; default: every GGUF file the command maps)")
	fs.BoolVar(&o.cold, "cold", false, "evict the model files from the page cache before the command starts")
	fs.BoolVar(&o.dropCaches, "drop-caches", false, "drop the whole system's page cache before the command starts")
	fs.StringVar(&o.memLimit, "mem-limit", "", "run the command in a memory cgroup with this limit (e.g. 256MiB)")
	fs.StringVar(&o.user, "user", "", "run the command as this user (default: the invoking user under sudo)")
	fs.BoolVar(&o.noIngest, "no-ingest", false, "do not build the query store at the end (run iocorr ingest DIR later)")
	fs.StringVar(&o.ringbuf, "ringbuf-size", "64MiB", "BPF ring buffer size (a power of two)")
	return func(ctx context.Context, args []string) error { return runRecord(ctx, o, args) }
}

// recording is the state of one `iocorr record`.
type recording struct {
	o      *recordOpts
	dir    string
	meta   rundir.Meta
	tr     *bpf.Tracer
	models *models
	child  *experiment.Child
	stats  liveStats

	mu        sync.Mutex
	warnings  []string
	searched  []string // files inspected for llama/ggml symbols
	layoutOK  bool
	layoutErr error
	mapsN     int
}

func (r *recording) warn(s string) {
	r.mu.Lock()
	r.warnings = append(r.warnings, s)
	r.mu.Unlock()
	fmt.Fprintf(stderr, "iocorr: warning: %s\n", s)
}

func runRecord(ctx context.Context, o *recordOpts, argv []string) error {
	if len(argv) == 0 {
		return usagef("record: no command given (iocorr record [flags] -- CMD ARGS...)")
	}
	if o.probe != "graph" && o.probe != "ops" {
		return usagef("record: --probe must be graph or ops, not %q", o.probe)
	}
	ringBytes, err := parseSize(o.ringbuf)
	if err != nil {
		return usagef("record: --ringbuf-size: %v", err)
	}
	var memLimit int64
	if o.memLimit != "" {
		if memLimit, err = parseSize(o.memLimit); err != nil {
			return usagef("record: --mem-limit: %v", err)
		}
	}
	r := &recording{o: o, dir: o.out}
	if err := prepareRunDir(o.out, o.force); err != nil {
		return err
	}

	var user *experiment.User
	if o.user != "" {
		if user, err = experiment.LookupUser(o.user); err != nil {
			return err
		}
	} else if user, err = experiment.SudoUser(); err != nil {
		return err
	}

	r.meta = rundir.Meta{
		Version: version, Command: argv, Host: experiment.HostInfo(), ProbeSet: o.probe,
		Controls: rundir.Controls{Cold: o.cold, DropCaches: o.dropCaches, MemLimit: memLimit},
	}
	// The metadata is written first, so that whatever happens later the
	// directory says what was attempted.
	r.meta.Start = time.Now()
	r.meta.Warnings = []string{"recording did not finish"}
	if err := rundir.WriteMeta(o.out, &r.meta); err != nil {
		return err
	}
	r.meta.Warnings = nil

	r.tr, err = bpf.Open(bpf.Options{ProbeOps: o.probe == "ops", RingBufBytes: int(ringBytes), SelfPID: os.Getpid()})
	if err != nil {
		if errors.Is(err, bpf.ErrPrivileges) {
			return fmt.Errorf("record: %w (run as root, or see `iocorr doctor`)", err)
		}
		return fmt.Errorf("record: %w", err)
	}
	defer r.tr.Close()

	r.models = newModels(r.warn, func(mf *rundir.ModelFile) error {
		if err := r.tr.AddFile(mf.Dev, mf.Ino); err != nil {
			return err
		}
		if mf.Block.DiskDev != 0 {
			return r.tr.AddDevice(mf.Block.DiskDev)
		}
		return nil
	})
	named := append([]string(nil), o.models...)
	named = append(named, candidatesInArgs(argv)...)
	for _, p := range named {
		if _, err := r.models.add(p); err != nil {
			return fmt.Errorf("record: %w", err)
		}
	}
	if o.dropCaches {
		if err := experiment.DropCaches(); err != nil {
			return fmt.Errorf("record: %w", err)
		}
	}

	sp, err := ingest.CreateSpool(filepath.Join(o.out, rundir.SpoolFile))
	if err != nil {
		return fmt.Errorf("record: %w", err)
	}

	child, err := experiment.StartHeld(argv, user, stdout, stderr)
	if err != nil {
		sp.Close()
		return fmt.Errorf("record: %w", err)
	}
	r.child = child
	r.meta.Child.PID = child.PID()
	if user != nil {
		r.meta.Child.UID, r.meta.Child.GID = int(user.UID), int(user.GID)
	}
	abort := func(err error) error {
		child.Abort()
		sp.Close()
		r.finish(nil, err)
		return fmt.Errorf("record: %w", err)
	}
	if err := r.tr.TracePID(child.PID()); err != nil {
		return abort(err)
	}
	var cg *experiment.Cgroup
	if memLimit > 0 {
		cg, err = experiment.NewMemoryCgroup(fmt.Sprintf("iocorr-%d", child.PID()), memLimit)
		if err != nil {
			return abort(err)
		}
		defer func() {
			if err := cg.Remove(); err != nil {
				fmt.Fprintf(stderr, "iocorr: %v\n", err)
			}
		}()
		r.meta.Controls.Cgroup, r.meta.Controls.CgroupVer = cg.Path, cg.Version
		if err := cg.Add(child.PID()); err != nil {
			return abort(err)
		}
	}
	// The executable itself is mapped by execve, not by mmap, so the
	// kernel cannot stop the child for it: probe it (and --lib files) now.
	if exe, err := lookPath(argv[0]); err == nil {
		r.attach(exe)
	}
	for _, l := range o.libs {
		if _, err := os.Stat(l); err != nil {
			return abort(fmt.Errorf("--lib %s: %w", l, err))
		}
		r.attach(l)
	}
	if o.cold {
		for i, mf := range r.models.files() {
			res, pages, err := experiment.Evict(mf.Path)
			if err != nil {
				return abort(err)
			}
			r.models.list[i].ResidentBefore = res
			if res > 0 {
				r.warn(fmt.Sprintf("--cold: %d of %d pages of %s stayed in the page cache", res, pages, mf.Path))
			}
		}
	} else {
		for i, mf := range r.models.files() {
			if res, _, err := experiment.Residency(mf.Path); err == nil {
				r.models.list[i].ResidentBefore = res
			}
		}
	}
	r.meta.DiskBefore, _ = experiment.DiskStats()
	r.meta.MonoStartNS = experiment.MonotonicNS()
	r.meta.Start = time.Now()

	drainCtx, stopDrain := context.WithCancel(context.Background())
	var counts ingest.Counts
	drainErr := make(chan error, 1)
	go func() { drainErr <- ingest.Drain(drainCtx, r.tr.RingBuf(), sp, &counts, r.act) }()

	stopStatus := r.stats.start(stderr, &counts, r.meta.Start)
	if err := child.Release(); err != nil {
		stopDrain()
		<-drainErr
		return abort(err)
	}
	stopForward := child.ForwardSignals()

	// The drain ends early only on a spool error (a full disk): the child
	// then runs on untraced and the run is marked incomplete.
	var derr error
	drained := false
	select {
	case <-child.Done():
	case derr = <-drainErr:
		drained = true
		r.warn(fmt.Sprintf("recording stopped early, the command runs on untraced: %v", derr))
		<-child.Done()
	}
	forwarded := stopForward()
	exit := child.Wait()
	r.meta.MonoEndNS = experiment.MonotonicNS()
	r.meta.End = time.Now()
	stopDrain()
	if !drained {
		derr = <-drainErr
	}
	stopStatus()
	if cerr := sp.Close(); derr == nil {
		derr = cerr
	}

	r.meta.Child.ExitCode, r.meta.Child.Signal = exit.Code, exit.Signal
	ru := exit.Rusage
	r.meta.Child.MajFlt, r.meta.Child.MinFlt = ru.Majflt, ru.Minflt
	r.meta.Child.InBlock, r.meta.Child.OutBlock, r.meta.Child.MaxRSSKiB = ru.Inblock, ru.Oublock, ru.Maxrss
	r.meta.Child.UserNS, r.meta.Child.SystemNS = syscall.TimevalToNsec(ru.Utime), syscall.TimevalToNsec(ru.Stime)
	r.meta.DiskAfter, _ = experiment.DiskStats()
	if cg != nil {
		r.meta.Controls.CgroupCounters = cg.Counters()
	}
	r.meta.Counts = counts.Map()
	if forwarded > 0 {
		r.warn(fmt.Sprintf("the command was interrupted (%d signal(s) forwarded)", forwarded))
	}
	if exit.Signal != "" {
		hint := ""
		if exit.Signal == "SIGKILL" && cg != nil {
			hint = fmt.Sprintf(" (the %s memory limit may be too small for the command itself: see cgroup_counters)", o.memLimit)
		}
		r.warn(fmt.Sprintf("the command was killed by %s%s", exit.Signal, hint))
	}
	r.finish(&exit, derr)
	r.printSummary(stderr, &counts)

	if user != nil {
		chownTree(o.out, int(user.UID), int(user.GID))
	}
	if derr != nil {
		return fmt.Errorf("record: %w (the run directory holds what was captured)", derr)
	}
	if !o.noIngest {
		if err := buildStore(ctx, o.out); err != nil {
			return fmt.Errorf("record: building the store: %w (run `iocorr ingest %s` to retry)", err, o.out)
		}
		if user != nil {
			chownTree(o.out, int(user.UID), int(user.GID))
		}
	}
	if exit.Code != 0 {
		return exitError{exit.Code}
	}
	return nil
}

// finish completes and writes the metadata; derr is the recording error.
func (r *recording) finish(exit *experiment.Exit, derr error) {
	lost, err := r.tr.Lost()
	if err != nil {
		r.warn(err.Error())
	}
	if lost == nil {
		lost = map[string]uint64{}
	}
	r.meta.Lost = lost
	var nlost uint64
	for _, n := range lost {
		nlost += n
	}
	if nlost > 0 {
		r.warn(fmt.Sprintf("%d events were lost (the ring buffer was full); raise --ringbuf-size", nlost))
	}
	// Requests issued while the child ran whose completion never reached
	// BPF (seen on this VM for a few completions run in softirq) are not
	// in the record: say how many instead of losing them silently.
	if n, err := r.tr.PendingBlockRequests(); err == nil && n > 0 {
		r.meta.BlockIncomplete = uint64(n)
		r.warn(fmt.Sprintf("%d block requests were seen issued but never completed; they are not in the record", n))
	}
	for _, p := range r.tr.Probes() {
		r.meta.Probes = append(r.meta.Probes, rundir.Probe{Kind: p.Kind, Target: p.Target, Symbol: p.Symbol, Error: p.Error})
	}
	seenLib := map[string]bool{}
	for _, p := range r.meta.Probes {
		if strings.HasPrefix(p.Kind, "uprobe") || p.Kind == "uretprobe" {
			if !seenLib[p.Target] && p.Error == "" {
				seenLib[p.Target] = true
				r.meta.Libraries = append(r.meta.Libraries, libraryInfo(p.Target))
			}
		}
	}
	r.meta.GoVersion = runtime.Version()
	lay := r.tr.Layout()
	tensor, graph := lay.Map()
	r.meta.Layout = &rundir.Layout{Source: lay.Source, Tensor: tensor, Graph: graph}
	if r.layoutOK {
		r.meta.Layout.Source += " (validated)"
	}
	r.meta.OpNames, _ = r.tr.OpNames()
	r.meta.OpFuncs = r.tr.OpFuncs()
	r.meta.Models = r.models.files()
	if !r.hasUserProbes() {
		r.warn(fmt.Sprintf("no llama.cpp symbols (%s) found, kernel events only; searched: %s",
			strings.Join(bpf.ProbeSymbols, ", "), strings.Join(r.searched, ", ")))
	}
	if r.layoutErr != nil {
		r.warn(fmt.Sprintf("ggml struct layout does not match the target (%v): graph nodes are not trustworthy", r.layoutErr))
	}
	r.mu.Lock()
	r.meta.Warnings = append(r.meta.Warnings, r.warnings...)
	r.mu.Unlock()
	r.meta.Complete = exit != nil && derr == nil && nlost == 0 && exit.Signal == ""
	if err := rundir.WriteMeta(r.dir, &r.meta); err != nil {
		fmt.Fprintf(stderr, "iocorr: %v\n", err)
	}
}

func (r *recording) hasUserProbes() bool {
	for _, p := range r.tr.Probes() {
		if p.Symbol == bpf.SymDecode && p.Error == "" {
			return true
		}
	}
	return false
}

// attach puts uprobes on a file if it has llama/ggml symbols.
func (r *recording) attach(path string) {
	r.mu.Lock()
	r.searched = append(r.searched, path)
	r.mu.Unlock()
	if _, err := r.tr.AttachUser(path); err != nil {
		r.warn(err.Error())
	}
}

// act runs on the drain goroutine for every record.
func (r *recording) act(typ uint16, rec []byte) {
	r.stats.observe(typ, rec, r)
	switch uint32(typ) {
	case uint32(bpf.IocorrEventTypeEV_MMAP):
		if len(rec) < int(unsafe.Sizeof(bpf.IocorrMmapEvent{})) {
			return
		}
		e := (*bpf.IocorrMmapEvent)(unsafe.Pointer(&rec[0]))
		pid := int(e.Hdr.Tgid)
		path := mappedPath(pid, e.Start, e.End)
		if e.Stopped == 1 {
			// The kernel stopped the process before it could run code
			// of this file: probe it, then let it go — always.
			if path != "" {
				r.attach(path)
			}
			unix.Kill(pid, unix.SIGCONT)
			return
		}
		if r.models.mapped(e.Dev, e.Ino, path) {
			r.snapshotMaps(pid, e.Hdr.Ts)
		}
	case uint32(bpf.IocorrEventTypeEV_NODE):
		if r.layoutOK || r.layoutErr != nil || len(rec) < int(unsafe.Sizeof(bpf.IocorrNodeEvent{})) {
			return
		}
		e := (*bpf.IocorrNodeEvent)(unsafe.Pointer(&rec[0]))
		names, _ := r.tr.OpNames()
		if err := bpf.ValidateNode(e, len(names)); err != nil {
			r.layoutErr = err
		} else {
			r.layoutOK = true
		}
	}
}

func (r *recording) snapshotMaps(pid int, ts uint64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return
	}
	dir := filepath.Join(r.dir, rundir.MapsDir)
	os.MkdirAll(dir, 0o755)
	r.mapsN++
	name := fmt.Sprintf("%04d-%d.txt", r.mapsN, pid)
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
		r.warn(fmt.Sprintf("saving maps of %d: %v", pid, err))
		return
	}
	r.mu.Lock()
	r.meta.Maps = append(r.meta.Maps, rundir.MapsSnapshot{MonoNS: ts, PID: pid, File: filepath.Join(rundir.MapsDir, name)})
	r.mu.Unlock()
}

// prepareRunDir creates the run directory, refusing to overwrite one
// unless forced — and never something that is not a run directory.
func prepareRunDir(dir string, force bool) error {
	if _, err := os.Stat(dir); err == nil {
		if !force {
			return fmt.Errorf("record: %s exists (use -f to overwrite it)", dir)
		}
		if _, err := os.Stat(filepath.Join(dir, rundir.MetaFile)); err != nil {
			if entries, _ := os.ReadDir(dir); len(entries) > 0 {
				return fmt.Errorf("record: %s exists and is not a run directory; not overwriting it", dir)
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("record: removing %s: %w", dir, err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("record: creating %s: %w", dir, err)
	}
	return nil
}

func chownTree(dir string, uid, gid int) {
	filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err == nil {
			os.Lchown(p, uid, gid)
		}
		return nil
	})
}

func lookPath(name string) (string, error) {
	if strings.Contains(name, "/") {
		return filepath.Abs(name)
	}
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in PATH", name)
}

// libraryInfo identifies a probed library by its GNU build id.
func libraryInfo(path string) rundir.Library {
	lib := rundir.Library{Path: path}
	if st, err := os.Stat(path); err == nil {
		lib.Size = st.Size()
	}
	f, err := elf.Open(path)
	if err != nil {
		return lib
	}
	defer f.Close()
	if s := f.Section(".note.gnu.build-id"); s != nil {
		if b, err := s.Data(); err == nil && len(b) > 16 {
			// Elf_Nhdr (namesz, descsz, type), "GNU\0", then the id.
			namesz := binary.LittleEndian.Uint32(b[0:])
			descsz := binary.LittleEndian.Uint32(b[4:])
			off := 12 + (int(namesz)+3)&^3
			if off+int(descsz) <= len(b) {
				lib.BuildID = hex.EncodeToString(b[off : off+int(descsz)])
			}
		}
	}
	return lib
}
