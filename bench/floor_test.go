package bench

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iocorr/iocorr/internal/testenv"
	"github.com/iocorr/iocorr/rundir"
)

// The floor's script is one bpftrace takes and attaches, with a uprobe on
// a library whose path is longer than bpftrace's 64-byte strings (the
// shared build's libraries are): a script bpftrace refuses leaves every
// floor NA.
func TestFloorScriptIsOneBpftraceAttaches(t *testing.T) {
	testenv.RequireBPF(t)
	bpftrace, err := exec.LookPath("bpftrace")
	if err != nil {
		t.Fatalf("bpftrace (make setup installs it) is needed: %v", err)
	}
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Fatalf("gcc is needed to build the probed library: %v", err)
	}
	dir := filepath.Join(t.TempDir(), strings.Repeat("a-directory-as-deep-as-a-build-cache-", 3))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, lib := filepath.Join(dir, "lib.c"), filepath.Join(dir, "libllama.so.0.5.0")
	if err := os.WriteFile(src, []byte("int llama_decode(void *c, int b) { return b + (c != 0); }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	run := t.TempDir()
	m := &rundir.Meta{Probes: []rundir.Probe{
		{Kind: "tracepoint", Target: "syscalls/sys_exit_read"},
		{Kind: "uprobe", Target: lib, Symbol: "llama_decode"},
		{Kind: "uretprobe", Target: lib, Symbol: "llama_decode"},
	}}
	if err := rundir.WriteMeta(run, m); err != nil {
		t.Fatal(err)
	}
	script, err := floorScript(run)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bpftrace, "-e", script)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	first := make(chan string, 1)
	go func() {
		rd := bufio.NewReader(stdout)
		line, _ := rd.ReadString('\n')
		first <- line
		io.Copy(io.Discard, rd)
	}()
	select {
	case line := <-first:
		if !strings.HasPrefix(line, "Attaching 4 probes") {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("bpftrace began with %q, want it attaching 4 probes\nscript:\n%s\nstderr: %s", line, script, stderr.String())
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("bpftrace said nothing in 60 s\nstderr: %s", stderr.String())
	}
	// It says so before it attaches, and stops on SIGINT only once it
	// has (as bpftraceFloor waits too).
	time.Sleep(2 * time.Second)
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Errorf("bpftrace: %v\nscript:\n%s\nstderr: %s", err, script, stderr.String())
	}
}
