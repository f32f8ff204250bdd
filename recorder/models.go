package recorder

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/internal/blockdev"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/internal/procmaps"
	"github.com/iocorr/iocorr/rundir"
)

// models keeps the model files of a run: those named with --model, those
// found on the command line, and any GGUF file the child maps.
type models struct {
	mu    sync.Mutex
	byID  map[[2]uint64]*rundir.ModelFile
	notGG map[[2]uint64]bool
	list  []*rundir.ModelFile
	// under are where the files the models' disks are stacked on lie:
	// their reads are the models' reads again, counted in no figure.
	under []kernel.DiskMap
	warn  func(string)
	onNew func(m *rundir.ModelFile) error
}

func newModels(warn func(string), onNew func(*rundir.ModelFile) error) *models {
	return &models{byID: map[[2]uint64]*rundir.ModelFile{}, notGG: map[[2]uint64]bool{}, warn: warn, onNew: onNew}
}

func isGGUF(path string) bool {
	// Never open a device file or a memfd to look: a GPU driver's
	// mappings are of those, and opening one can have effects.
	if procmaps.BackingOf(path) != procmaps.BackingFile {
		return false
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [4]byte
	if _, err := f.Read(magic[:]); err != nil {
		return false
	}
	return bytes.Equal(magic[:], []byte(gguf.Magic))
}

// candidatesInArgs finds GGUF files named on the command line
// (`-m model.gguf`, `--model=model.gguf`), also inside an argument that is
// itself a command line (`sh -c "llama-cli -m model.gguf …"`), so that
// they are known — and can be made cold — before a process maps them.
func candidatesInArgs(argv []string) []string { return candidatesIn(argv, "", nil) }

// candidatesIn is candidatesInArgs for a process whose working directory
// is dir (relative names are its); "" is the recorder's own. A file that
// known reports a model already is left out unread: reading its magic would
// bring its first pages back into the page cache from the device after
// --cold evicted them, a read the traced program never made.
func candidatesIn(argv []string, dir string, known func(path string) bool) []string {
	if len(argv) < 2 {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for _, arg := range argv[1:] {
		for _, a := range append([]string{arg}, strings.Fields(arg)...) {
			a = strings.Trim(a, `'"`)
			if _, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(a, "-") {
				a = v
			}
			if seen[a] {
				continue
			}
			seen[a] = true
			// isGGUF takes only an absolute path (a mapping's): a relative
			// one is the process's (dir), or, before the start, the
			// recorder's, the directory the command starts in.
			if a != "" && !filepath.IsAbs(a) {
				if dir == "" {
					if abs, err := filepath.Abs(a); err == nil {
						a = abs
					}
				} else if real, err := filepath.EvalSymlinks(filepath.Join(dir, a)); err == nil {
					a = real
				}
			}
			if known != nil && known(a) {
				continue
			}
			if st, err := os.Stat(a); err == nil && st.Mode().IsRegular() && isGGUF(a) {
				out = append(out, a)
			}
		}
	}
	return out
}

// add registers a model file by path; known files are returned as is.
func (m *models) add(path string) (*rundir.ModelFile, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	id, err := blockdev.StatFile(abs)
	if err != nil {
		return nil, err
	}
	key := [2]uint64{uint64(id.Dev), id.Ino}
	m.mu.Lock()
	defer m.mu.Unlock()
	if mf, ok := m.byID[key]; ok {
		return mf, nil
	}
	mf := &rundir.ModelFile{Path: abs, Dev: id.Dev, Ino: id.Ino, Size: id.Size, Pages: (id.Size + kernel.PageSize - 1) / kernel.PageSize}
	f, err := gguf.Open(abs)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", abs, err)
	}
	mf.DataOffset = f.DataOffset
	mf.Tensors = rundir.TensorsOf(f)
	if mf.Extents, err = blockdev.Extents(abs); err != nil {
		m.warn(fmt.Sprintf("model %s: no extents, block requests cannot be attributed to it: %v", abs, err))
	}
	if mf.Block, err = blockdev.Of(id); err != nil {
		m.warn(fmt.Sprintf("model %s: %v", abs, err))
	}
	mf.Beneath, mf.BlockNA = m.beneath(abs, mf.Block)
	if m.onNew != nil {
		if err := m.onNew(mf); err != nil {
			return nil, err
		}
	}
	m.byID[key] = mf
	m.list = append(m.list, mf)
	for i := range mf.Beneath {
		m.under = append(m.under, kernel.NewDiskMap(&mf.Beneath[i].Block, mf.Beneath[i].Extents))
	}
	return mf, nil
}

// readBeneath says whether a read request at byte d of disk dev reads a
// file some model's disk is stacked on, as the correlator classes it.
func (m *models) readBeneath(dev uint32, d uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range m.under {
		if m.under[i].Holds(dev, d) {
			return true
		}
	}
	return false
}

// mapped is called for a file mapping of the child: it becomes a model if
// it is a GGUF file. It reports whether the file is a model, and whether
// it became one just now.
func (m *models) mapped(dev uint32, ino uint64, path string) (isModel, isNew bool) {
	key := [2]uint64{uint64(dev), ino}
	if m.known(dev, ino) {
		return true, false
	}
	if path == "" || m.decided(dev, ino) {
		return false, false
	}
	if !isGGUF(path) {
		m.mu.Lock()
		m.notGG[key] = true
		m.mu.Unlock()
		return false, false
	}
	if _, err := m.add(path); err != nil {
		m.warn(err.Error())
		m.mu.Lock()
		m.notGG[key] = true
		m.mu.Unlock()
		return false, false
	}
	return true, true
}

// decided says whether (dev, ino) is known for a model or known for not
// being one: mapped needs no path for it then.
func (m *models) decided(dev uint32, ino uint64) bool {
	key := [2]uint64{uint64(dev), ino}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, known := m.byID[key]
	return known || m.notGG[key]
}

// has reports whether the file at path is a model already.
func (m *models) has(path string) bool {
	id, err := blockdev.StatFile(path)
	return err == nil && m.known(uint32(id.Dev), id.Ino)
}

// known reports whether (dev, ino) is a model file, without looking at
// the file: it runs for every fault and page-cache event.
func (m *models) known(dev uint32, ino uint64) bool {
	m.mu.Lock()
	_, ok := m.byID[[2]uint64{uint64(dev), ino}]
	m.mu.Unlock()
	return ok
}

// setResident records the page-cache residency of the i'th model at the
// start.
func (m *models) setResident(i int, pages int64) {
	m.mu.Lock()
	m.list[i].ResidentBefore = pages
	m.mu.Unlock()
}

// setResidentEnd records the i'th model's page-cache map at the end.
func (m *models) setResidentEnd(i int, pm *rundir.PageMap) {
	m.mu.Lock()
	m.list[i].ResidentEnd = pm
	m.mu.Unlock()
}

func (m *models) files() []rundir.ModelFile {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]rundir.ModelFile, len(m.list))
	for i, mf := range m.list {
		out[i] = *mf
	}
	return out
}

// mappedPath names the file behind a mapping of a process.
func mappedPath(pid int, start, end uint64) string {
	p, err := os.Readlink(fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, start, end))
	if err == nil {
		return p
	}
	// map_files needs CAP_SYS_ADMIN; /proc/PID/maps does not.
	ms, err := procmaps.Read(pid)
	if err != nil {
		return ""
	}
	for _, m := range ms {
		if m.Start == start && m.End == end {
			return m.Name()
		}
	}
	return ""
}

// maxStack bounds how many loop devices beneath a model are followed: a
// loop device may be bound to a file on another, never in a cycle.
const maxStack = 8

// beneath follows the loop devices a model's disk is stacked on (the
// backing files whose reads repeat the disk's), and says why the model's
// requests are NA where the disk is built on devices whose requests
// iocorr does not map back.
func (m *models) beneath(model string, bd kernel.BlockDevice) (out []rundir.BackingFile, blockNA string) {
	for range maxStack {
		if bd.DiskDev == 0 {
			return out, ""
		}
		st, err := blockdev.StackOf(bd.DiskDev)
		switch {
		case err != nil:
			m.warn(fmt.Sprintf("model %s: %v: what is read beneath its disk may count as reads of other files", model, err))
			return out, ""
		case len(st.Slaves) > 0:
			// A device mapper's or md's bios go on to the devices beneath
			// at sectors of their own: the requests are issued there.
			why := fmt.Sprintf("its disk %s is built on %s (device mapper or md): its requests are issued there, at sectors iocorr does not map back to the file, so they count as reads of other files and none as the model's",
				bd.Name, strings.Join(st.Slaves, ", "))
			m.warn("model " + model + ": " + why)
			return out, why
		case st.Backing == "":
			return out, ""
		}
		bf := rundir.BackingFile{Path: st.Backing, Offset: st.Offset}
		id, err := blockdev.StatFile(st.Backing)
		if err == nil {
			bf.Block, err = blockdev.Of(id)
			if errors.Is(err, fs.ErrNotExist) {
				// A backing file in memory (tmpfs): no disk is read beneath.
				return out, ""
			}
		}
		if err == nil {
			bf.Extents, err = blockdev.Extents(st.Backing)
		}
		if err != nil {
			m.warn(fmt.Sprintf("model %s: its disk %s is a loop device on %s: %v: that file's reads may count as reads of other files", model, bd.Name, st.Backing, err))
			return out, ""
		}
		out = append(out, bf)
		bd = bf.Block
	}
	return out, ""
}
