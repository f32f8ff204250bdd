package recorder

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/internal/launch"
	"github.com/iocorr/iocorr/pin"
	"github.com/iocorr/iocorr/prefetch"
	"github.com/iocorr/iocorr/rundir"
)

// Run re-executes its own binary as the held child; in tests that binary
// is the test binary, which must then become the command.
func TestMain(m *testing.M) {
	launch.RunShimIfChild()
	pin.RunHolderIfChild()      // --pin's holder re-executes the binary too
	prefetch.RunHelperIfChild() // and --prefetch's helper
	os.Exit(m.Run())
}

func options(dir string, argv ...string) Options {
	return Options{Dir: dir, Argv: argv, RingBufBytes: 1 << 20, Stdout: os.Stdout, Stderr: os.Stderr}
}

func TestValidateRefusesOptionsThatCannotWork(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	tests := []struct {
		name   string
		change func(o *Options)
		want   string
		option bool // an *OptionError
	}{
		{"no command", func(o *Options) { o.Argv = nil }, "no command given", true},
		{"no directory", func(o *Options) { o.Dir = "" }, "no run directory", true},
		{"ring not a power of two", func(o *Options) { o.RingBufBytes = 3000 }, "power of two", true},
		{"ring too small", func(o *Options) { o.RingBufBytes = 1024 }, "power of two", true},
		{"ring too large", func(o *Options) { o.RingBufBytes = 2 << 30 }, "power of two", true},
		{"ring negative", func(o *Options) { o.RingBufBytes = -4096 }, "power of two", true},
		{"memory limit too small", func(o *Options) { o.MemLimit = 64 << 10 }, "below 1MiB", true},
		{"command not found", func(o *Options) { o.Argv = []string{"no-such-command-iocorr"} }, "not found", false},
		{"model missing", func(o *Options) { o.Models = []string{"/no/such.gguf"} }, "no such file", false},
		{"library missing", func(o *Options) { o.Libs = []string{"/no/such.so"} }, "no such file", false},
		{"a command and a pid", func(o *Options) { o.PID = os.Getpid() }, "one or the other", true},
		{"a pid and a memory limit", func(o *Options) { o.Argv, o.PID, o.MemLimit = nil, os.Getpid(), 64<<20 }, "not to -p", true},
		{"no such process", func(o *Options) { o.Argv, o.PID = nil, 1<<30 }, "no such process", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := options(dir, "true")
			tc.change(&o)
			err := o.Validate()
			var oe *OptionError
			if err == nil || !strings.Contains(err.Error(), tc.want) || errors.As(err, &oe) != tc.option {
				t.Fatalf("err = %v (option error: %v), want %q (option error: %v)", err, errors.As(err, &oe), tc.want, tc.option)
			}
			if _, err := Run(context.Background(), o); err == nil {
				t.Fatal("Run accepted what Validate refused")
			}
			if _, err := os.Stat(dir); err == nil {
				t.Fatal("a refused run left a run directory")
			}
		})
	}
	// 0 is the tracer's default ring (DefaultRingBufBytes).
	for _, ring := range []int{0, 1 << 20} {
		o := options(dir, "true")
		o.RingBufBytes = ring
		if err := o.Validate(); err != nil {
			t.Fatalf("good options (ring %d) refused: %v", ring, err)
		}
	}
}

func TestRunThatCannotAttachLeavesAFinishedRunSayingWhy(t *testing.T) {
	defer func(f func(bpf.Options) (*bpf.Tracer, error)) { openTracer = f }(openTracer)
	openTracer = func(bpf.Options) (*bpf.Tracer, error) {
		// What bpf.Open says when a tracepoint is missing.
		return nil, fmt.Errorf("attaching tracepoint filemap/mm_filemap_fault: %w", os.ErrNotExist)
	}
	dir := filepath.Join(t.TempDir(), "run")
	mark := filepath.Join(t.TempDir(), "ran")
	res, err := Run(context.Background(), options(dir, "touch", mark))
	if err == nil || !strings.Contains(err.Error(), "mm_filemap_fault") || !strings.Contains(err.Error(), "doctor") {
		t.Fatalf("err = %v", err)
	}
	requireNotRunAndSaid(t, res, dir, mark, "mm_filemap_fault")
}

// requireNotRunAndSaid fails t unless a run that stopped before its
// command ran says so: the result, no mark of the command (it touches
// mark), and a finished, incomplete meta.json whose warnings name why
// and whose lost counts were read, not left out.
func requireNotRunAndSaid(t *testing.T, res Result, dir, mark, why string) {
	t.Helper()
	if res.Ran {
		t.Error("the result says the command ran")
	}
	if _, err := os.Stat(mark); err == nil {
		t.Fatal("the command ran")
	}
	m, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Complete || !m.Finished || !strings.Contains(strings.Join(m.Warnings, "\n"), why) || m.Lost == nil {
		t.Fatalf("complete %v, finished %v, warnings %q, lost %v", m.Complete, m.Finished, m.Warnings, m.Lost)
	}
}
