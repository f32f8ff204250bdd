package proc

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Stat is what iocorr reads of /proc/PID/stat.
type Stat struct {
	State  byte   // field 3: R, S, D, T, t, Z, X...
	MajFlt uint64 // field 12: the task's own major faults
}

// ReadStat reads /proc/PID/stat; pid may be a thread's id.
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Stat{}, err
	}
	// The fields follow the command name, which is in parentheses and
	// may itself hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return Stat{}, fmt.Errorf("task %d: unreadable stat %q", pid, b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 10 {
		return Stat{}, fmt.Errorf("task %d: unreadable stat %q", pid, b)
	}
	majflt, err := strconv.ParseUint(f[9], 10, 64)
	if err != nil {
		return Stat{}, fmt.Errorf("task %d: major faults in stat: %w", pid, err)
	}
	return Stat{State: f[0][0], MajFlt: majflt}, nil
}

// State is a task's state letter, 0 when it cannot be read (the task is
// gone).
func State(pid int) byte {
	s, err := ReadStat(pid)
	if err != nil {
		return 0
	}
	return s.State
}

// StatusField is the value of a "Key:" line of /proc/PID/status (pid
// "self" or an id), trimmed; ok is false when the file or the line is
// missing.
func StatusField(pid, key string) (v string, ok bool) {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return "", false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}
