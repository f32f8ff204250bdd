package proc

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func TestReadStatFindsTheFieldsPastACommandNameWithParenthesesAndSpaces(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep(1)")
	}
	b, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	odd := filepath.Join(t.TempDir(), "a) b (c")
	if err := os.WriteFile(odd, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(odd, "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	// Asleep once it runs: R while it starts, S after.
	var st Stat
	for range 200 {
		if st, err = ReadStat(cmd.Process.Pid); err == nil && st.State == 'S' {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err != nil || st.State != 'S' {
		t.Fatalf("stat of %q: %+v, %v; want state S", odd, st, err)
	}
	if got := State(cmd.Process.Pid); got != 'S' {
		t.Errorf("State %q, want S", got)
	}
	if v, ok := StatusField(strconv.Itoa(cmd.Process.Pid), "PPid"); !ok || v != strconv.Itoa(os.Getpid()) {
		t.Errorf("PPid %q (%v), want %d", v, ok, os.Getpid())
	}
}

func TestGoneTasksHaveNoState(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip("no true(1)")
	}
	if got := State(cmd.Process.Pid); got != 0 {
		t.Errorf("State of a reaped process %q, want 0", got)
	}
	if _, err := ReadStat(cmd.Process.Pid); err == nil {
		t.Error("ReadStat of a reaped process succeeded")
	}
	if _, ok := StatusField(strconv.Itoa(cmd.Process.Pid), "Tgid"); ok {
		t.Error("StatusField of a reaped process found its line")
	}
}
