package proc

import (
	"fmt"
	"os"
	"strings"
)

// State is a task's state letter (/proc/PID/stat field 3: R, S, D, T, t,
// Z, X...), 0 when it cannot be read (the task is gone). pid may be a
// thread's id.
func State(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The state follows the command name, which is in parentheses and
	// may itself hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}
