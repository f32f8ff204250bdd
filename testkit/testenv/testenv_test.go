package testenv

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"testing"
)

// outcome records how missing ended a test instead of ending this one.
type outcome struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (o *outcome) Helper() {}
func (o *outcome) Skipf(format string, args ...any) {
	o.skipped, o.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (o *outcome) Fatalf(format string, args ...any) {
	o.failed, o.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestAMissingPrivilegeSkipsOnlyWhenNotRequired(t *testing.T) {
	tests := []struct {
		name                string
		require             string
		wantSkip, wantFatal bool
	}{
		{"unset: skip", "", true, false},
		{"set: fail", "1", false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(RequireEnv, tc.require)
			o := &outcome{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				missing(o, "no privilege")
			}()
			<-done
			if o.skipped != tc.wantSkip || o.failed != tc.wantFatal {
				t.Errorf("skipped %v, failed %v (%q); want skipped %v, failed %v", o.skipped, o.failed, o.msg, tc.wantSkip, tc.wantFatal)
			}
			if !bytes.Contains([]byte(o.msg), []byte(RequireEnv)) {
				t.Errorf("message %q does not name %s", o.msg, RequireEnv)
			}
		})
	}
}

func TestOpenPTYConnectsMasterAndSlave(t *testing.T) {
	master, slave := OpenPTY(t)
	// The line discipline echoes and cooks input; a raw write from the
	// slave side arrives at the master unchanged but for "\n" → "\r\n".
	if _, err := slave.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 6)
	if _, err := io.ReadFull(master, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != "ping\r\n" {
		t.Errorf("master read %q, want %q", got, "ping\r\n")
	}
}
