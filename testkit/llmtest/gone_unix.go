//go:build unix

package llmtest

import "syscall"

// processGone says whether no process has pid.
func processGone(pid int) bool { return syscall.Kill(pid, 0) == syscall.ESRCH }
