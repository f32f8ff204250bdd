package recorder

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/internal/elfinfo"
	"github.com/iocorr/iocorr/internal/proc"
	"github.com/iocorr/iocorr/rundir"
)

// prepareRunDir creates the run directory, refusing to overwrite one
// unless forced — and never something that is not a run directory.
func prepareRunDir(dir string, force bool) error {
	if _, err := os.Stat(dir); err == nil {
		if !force {
			return fmt.Errorf("%s exists (use -f to overwrite it)", dir)
		}
		if _, err := os.Stat(filepath.Join(dir, rundir.MetaFile)); err != nil {
			if entries, _ := os.ReadDir(dir); len(entries) > 0 {
				return fmt.Errorf("%s exists and is not a run directory; not overwriting it", dir)
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("removing %s: %w", dir, err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	return nil
}

// ChownRun hands everything in a run directory to u (nil: nobody to hand
// it to). Run does it at its end; a caller that adds files later (the
// query store) calls it again.
func ChownRun(dir string, u *proc.User) error {
	if u == nil {
		return nil
	}
	var first error
	filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err == nil {
			err = os.Lchown(p, int(u.UID), int(u.GID))
		}
		if err != nil && first == nil {
			first = fmt.Errorf("handing %s to uid %d: %w", p, u.UID, err)
		}
		return nil
	})
	return first
}

// reserveSpace holds a few MiB in the run directory for the final
// metadata: when the spool fills the disk, meta.json must still fit.
// It takes what it can on a small disk, and nothing on a full one.
func reserveSpace(dir string) string {
	p := filepath.Join(dir, ".meta-reserve")
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return ""
	}
	defer f.Close()
	for size := int64(8 << 20); size >= 16<<10; size /= 2 {
		if unix.Fallocate(int(f.Fd()), 0, 0, size) == nil {
			return p
		}
	}
	os.Remove(p)
	return ""
}

// lookPath finds the executable the held child will exec, as an absolute
// path (its uprobes go on that file).
func lookPath(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", err
	}
	return filepath.Abs(p)
}

// libraryInfo identifies a probed library by its GNU build id; a library
// without one is still listed.
func libraryInfo(path string) rundir.Library {
	lib := rundir.Library{Path: path}
	if st, err := os.Stat(path); err == nil {
		lib.Size = st.Size()
	}
	if id, err := elfinfo.BuildID(path); err == nil {
		lib.BuildID = id
	} else if !errors.Is(err, elfinfo.ErrNoBuildID) {
		lib.BuildIDError = err.Error()
	}
	return lib
}
