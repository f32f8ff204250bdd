// Package atomicfile replaces a file so that a reader, or a process killed
// midway (the recorder under SIGKILL, an export on a full disk), sees the
// old content or the new one, never a part of it. It is the one
// write-to-temporary-then-rename of the tree.
package atomicfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// TempName is the temporary file Write fills for path: in the same
// directory, so the rename stays within one file system, and always the
// same name, so that what a killed writer left is replaced by the next
// write instead of piling up in a run directory. A path has one writer at
// a time.
func TempName(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
}

// Write fills TempName(path) through a buffered writer and renames it over
// path with mode perm. With sync set the
// data and the directory entry reach the disk before Write returns: a file
// the next step evicts from the page cache must not be dirty (dirty pages
// stay resident), and a run directory must survive a power cut. On error
// the temporary file is removed and path is left as it was.
func Write(path string, perm os.FileMode, sync bool, fill func(io.Writer) error) (err error) {
	f, err := os.OpenFile(TempName(path), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			os.Remove(f.Name())
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	err = fill(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil && sync {
		err = f.Sync()
	}
	err = errors.Join(err, f.Close())
	if err == nil {
		err = os.Chmod(f.Name(), perm)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if sync {
		return syncDir(filepath.Dir(path))
	}
	return nil
}

// WriteBytes is Write of a byte slice.
func WriteBytes(path string, perm os.FileMode, sync bool, b []byte) error {
	return Write(path, perm, sync, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}
