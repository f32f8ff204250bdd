package recorder_test

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/internal/blockdev"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/testkit/rectest"
	"github.com/iocorr/iocorr/testkit/storetest"
	"github.com/iocorr/iocorr/testkit/testenv"
)

// TestAModelOnALoopDeviceIsReadOnceNotAgainBeneathIt reads a model on an
// ext4 file system in a loop device (direct I/O, as the bench's slow disk
// is built). Where its backing file lies on this VM's disk, the loop
// driver reads each of the loop device's requests again from that file,
// and the trace sees both: the model's bytes are the loop device's
// (/proc/diskstats, the oracle); the backing file's reads are kept as
// reads beneath it, as many bytes, and counted in no token's reads, where
// before they doubled every run's bytes read and amplification. Where it
// lies in tmpfs, no disk is read beneath, and nothing is said of it.
func TestAModelOnALoopDeviceIsReadOnceNotAgainBeneathIt(t *testing.T) {
	testenv.RequireBPF(t)
	model, _ := rectest.PageableMoE(t)
	for _, tc := range []struct {
		name    string
		img     func(t *testing.T) string
		beneath bool
	}{
		{"backed by a file on a disk", func(t *testing.T) string { return testenv.DiskFile(t, nil) }, true},
		{"backed by a file in tmpfs", shmFile, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img, err := filepath.Abs(tc.img(t))
			if err != nil {
				t.Fatal(err)
			}
			loop, mnt := loopFileSystem(t, model, img)
			copied := filepath.Join(mnt, "model.gguf")
			copyFile(t, model, copied)

			before := diskReadBytes(t, filepath.Base(loop))
			dir := filepath.Join(t.TempDir(), "run")
			out := rectest.Record(t, dir, rectest.Options{Cold: true}, "cat", copied)
			loopRead := diskReadBytes(t, filepath.Base(loop)) - before

			m, err := rundir.ReadMeta(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(m.Models) != 1 {
				t.Fatalf("%d models, want the copy", len(m.Models))
			}
			var wantBeneath uint64
			if mf := &m.Models[0]; tc.beneath {
				lower, err := blockdev.OfFile(img)
				if err != nil {
					t.Fatal(err)
				}
				if len(mf.Beneath) != 1 || mf.Beneath[0].Path != img || mf.Beneath[0].Block.DiskDev != lower.DiskDev || len(mf.Beneath[0].Extents) == 0 {
					t.Fatalf("beneath the model %+v, want %s on %x", mf.Beneath, img, lower.DiskDev)
				}
				wantBeneath = loopRead
			} else if len(mf.Beneath) != 0 || mf.BlockNA != "" {
				t.Errorf("beneath the model %+v, block NA %q: want nothing", mf.Beneath, mf.BlockNA)
			}
			if strings.Contains(out.Stderr, "loop device") || strings.Contains(out.Stderr, "beneath") {
				t.Errorf("the recorder warned of the stack:\n%s", out.Stderr)
			}
			st := storetest.Open(t, dir)
			var modelBytes, beneath, counted uint64
			if err := st.Records(store.EventFilter{}, func(rec []event.Event) error {
				for _, e := range rec {
					switch {
					case e.Kind != event.KindBlock || event.BlockWrite(e.Class):
					case e.Class&event.ClassBeneath != 0:
						beneath += e.Bytes
					case e.Tensor != event.TensorOther:
						modelBytes += e.Bytes
						counted += e.Bytes
					default:
						counted += e.Bytes
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			tokens, err := st.Tokens()
			if err != nil {
				t.Fatal(err)
			}
			var tokenRead uint64
			for _, tk := range tokens {
				tokenRead += tk.ReadBytes
			}
			t.Logf("the loop device read %d bytes (diskstats); iocorr: the model %d, beneath it %d, the tokens %d (all reads but those beneath: %d)",
				loopRead, modelBytes, beneath, tokenRead, counted)
			if loopRead == 0 || modelBytes != loopRead {
				t.Errorf("the model's requests read %d bytes, the loop device %d", modelBytes, loopRead)
			}
			if beneath != wantBeneath {
				t.Errorf("reads beneath the loop device %d bytes, want %d", beneath, wantBeneath)
			}
			if tokenRead != counted {
				t.Errorf("the tokens read %d bytes, want %d: every read but those beneath the model's disk", tokenRead, counted)
			}
			if out.Live.BlockRead != counted {
				t.Errorf("record's summary says %d bytes read, want %d: every read but those beneath the model's disk", out.Live.BlockRead, counted)
			}
		})
	}
}

// shmFile is a new empty file in tmpfs, removed when t ends.
func shmFile(t *testing.T) string {
	f, err := os.CreateTemp("/dev/shm", "iocorr-loop-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(f.Name()) })
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// loopFileSystem makes an ext4 file system on a loop device (direct I/O)
// backed by img, with room for a copy of model, mounted for the test's
// life: the loop device and the mount point.
func loopFileSystem(t *testing.T, model, img string) (loop, mnt string) {
	t.Helper()
	for _, tool := range []string{"losetup", "mkfs.ext4"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s: %v (util-linux and e2fsprogs)", tool, err)
		}
	}
	fi, err := os.Stat(model)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, (fi.Size()+fi.Size()/4+32<<20)>>20<<20); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--direct-io=on", "--find", "--show", img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup %s: %v: %s", img, err, out)
	}
	loop = strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "--detach", loop).CombinedOutput(); err != nil {
			t.Errorf("losetup --detach %s: %v: %s", loop, err, out)
		}
	})
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", loop).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4 %s: %v: %s", loop, err, out)
	}
	mnt = t.TempDir()
	if err := unix.Mount(loop, mnt, "ext4", 0, ""); err != nil {
		t.Fatalf("mounting %s: %v", loop, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, 0); err != nil {
			t.Errorf("unmounting %s: %v", mnt, err)
		}
	})
	return loop, mnt
}

// copyFile copies src to dst and syncs it, so that an eviction leaves
// none of it in the page cache.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

// diskReadBytes is what /proc/diskstats says disk name has read.
func diskReadBytes(t *testing.T, name string) uint64 {
	t.Helper()
	ds, err := blockdev.DiskStats(name)
	if err != nil || len(ds) != 1 {
		t.Fatalf("diskstats of %s: %v (%d rows)", name, err, len(ds))
	}
	return ds[0].SectorsRead * 512
}
