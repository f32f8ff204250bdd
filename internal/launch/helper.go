package launch

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
)

// iocorr re-executes itself for each of its helper children: the held
// child that becomes the traced command (StartHeld), the ptrace warden
// (StartWarden) and pin's holder. Each is the same executable, told its
// role by one variable of its environment, which its main reads before
// anything else (RunShimIfChild, pin.RunHolderIfChild): a second binary
// would have to be found, installed and kept at iocorr's version.

// HelperCommand is iocorr's own executable run with args as the helper
// child role names. A process that is itself a helper child refuses
// (notAShim): its main did not become the helper, and each level would
// start the next.
func HelperCommand(role string, args ...string) (*exec.Cmd, error) {
	if err := notAShim(); err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding iocorr's own executable: %w", err)
	}
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), role+"=1")
	return cmd, nil
}

// IsHelper says whether this process was started as role's helper child.
func IsHelper(role string) bool { return os.Getenv(role) == "1" }

// StartHelper starts the helper child role names, which speaks lines
// over its standard input (in) and output (out) and writes its own
// troubles to iocorr's standard error; what names it in errors, and sys
// (nil: none) is how the kernel starts it. place (nil: none) puts it,
// into a memory cgroup, before it is asked anything: every page it reads
// in is charged there. A helper that could not be placed is ended.
func StartHelper(role, what string, sys *syscall.SysProcAttr, place func(pid int) error) (cmd *exec.Cmd, in io.WriteCloser, out io.ReadCloser, err error) {
	if cmd, err = HelperCommand(role); err != nil {
		return nil, nil, nil, err
	}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = sys
	if in, err = cmd.StdinPipe(); err != nil {
		return nil, nil, nil, err
	}
	if out, err = cmd.StdoutPipe(); err != nil {
		return nil, nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, nil, fmt.Errorf("starting %s: %w", what, err)
	}
	if place != nil {
		if err := place(cmd.Process.Pid); err != nil {
			in.Close()
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return nil, nil, nil, fmt.Errorf("placing %s: %w", what, err)
		}
	}
	return cmd, in, out, nil
}
