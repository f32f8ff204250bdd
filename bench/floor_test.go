package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/testenv"
)

// The floor's script is one bpftrace takes and attaches, with a uprobe on
// a library whose path is longer than bpftrace's 64-byte strings (the
// shared build's libraries are): a script bpftrace refuses leaves every
// floor NA.
func TestFloorScriptIsOneBpftraceAttaches(t *testing.T) {
	testenv.RequireBPF(t)
	if _, err := exec.LookPath("bpftrace"); err != nil {
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
	bt, err := startBpftrace(script)
	if err != nil {
		t.Fatalf("%v\nscript:\n%s", err, script)
	}
	if err := bt.stop(); err != nil {
		t.Errorf("%v\nscript:\n%s", err, script)
	}
}
