// Package atomicfile replaces a file so that a reader, or a process killed
// midway (the recorder under SIGKILL, an export on a full disk), sees the
// old content or the new one, never a part of it. It is the one
// write-to-temporary-then-rename of the tree: Write for what iocorr writes
// itself, Publish for a file another program wrote aside.
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

// Write fills TempName(path) through a buffered writer and publishes it
// over path with mode perm. With sync set the data and the directory entry
// reach the disk before Write returns: a file the next step evicts from
// the page cache must not be dirty (dirty pages stay resident), and a run
// directory must survive a power cut. On error the temporary file is
// removed and path is left as it was.
func Write(path string, perm os.FileMode, sync bool, fill func(io.Writer) error) (err error) {
	return write(path, perm, sync, func(f *os.File) error {
		bw := bufio.NewWriterSize(f, 1<<20)
		if err := fill(bw); err != nil {
			return err
		}
		return bw.Flush()
	})
}

// write is Write with fill given the temporary file itself.
func write(path string, perm os.FileMode, sync bool, fill func(*os.File) error) (err error) {
	f, err := os.OpenFile(TempName(path), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	err = fill(f)
	if err = errors.Join(err, f.Close()); err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return Publish(f.Name(), path, perm, sync)
}

// Publish puts tmp, a file already written and closed by someone else (a
// tool such as llama-quantize, or Write), in place of path with mode perm:
// with sync set its data reaches the disk before the rename and the
// directory entry after it, as in Write. tmp must be in path's directory,
// so the rename stays within one file system. On error tmp is removed and
// path is left as it was.
func Publish(tmp, path string, perm os.FileMode, sync bool) error {
	err := os.Chmod(tmp, perm)
	if err == nil && sync {
		err = syncFile(tmp)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if sync {
		return syncDir(filepath.Dir(path))
	}
	return nil
}

// syncFile flushes a closed file's data: fsync through any descriptor of
// the inode writes all its dirty pages, whoever dirtied them.
func syncFile(name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}

// WriteBytes is Write of a byte slice.
func WriteBytes(path string, perm os.FileMode, sync bool, b []byte) error {
	// In one write, not through Write's 1 MiB buffer: the recorder
	// rewrites meta.json at every change of a run, and allocating and
	// clearing that buffer each time was ~30 ms of its CPU per run.
	return write(path, perm, sync, func(f *os.File) error {
		_, err := f.Write(b)
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
