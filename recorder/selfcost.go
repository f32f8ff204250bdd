package recorder

import (
	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/rundir"
)

// selfCost is the recorder's own cost, as meta.json's recorder figures
// give it: its CPU (user+sys) and voluntary context switches when it let
// the command run and when the command exited, and its whole rusage at
// the end. A recording's CPU counts against the run it measures (issue
// 18): only what it spent while the command ran competed with it. An
// attached recording takes no phase samples: it has the end's figures only.
type selfCost struct {
	// rusage reads the recorder's rusage; nil is getrusage(RUSAGE_SELF).
	// A test gives figures of its own.
	rusage            func(*unix.Rusage) error
	atRelease, atExit selfUsage
}

// selfUsage is the recorder's CPU so far and its voluntary context
// switches, both 0 when unknown.
type selfUsage struct{ cpuNS, wakes int64 }

func (c *selfCost) read(ru *unix.Rusage) error {
	if c.rusage != nil {
		return c.rusage(ru)
	}
	return unix.Getrusage(unix.RUSAGE_SELF, ru)
}

func (c *selfCost) sample() selfUsage {
	var ru unix.Rusage
	if err := c.read(&ru); err != nil {
		return selfUsage{}
	}
	return selfUsage{unix.TimevalToNsec(ru.Utime) + unix.TimevalToNsec(ru.Stime), ru.Nvcsw}
}

// released samples the cost as the command is let go.
func (c *selfCost) released() { c.atRelease = c.sample() }

// exited samples the cost as the command has exited.
func (c *selfCost) exited() { c.atExit = c.sample() }

// summary is meta.json's recorder figures now: nil when the rusage cannot
// be read, the phases only when both samples were taken and agree.
func (c *selfCost) summary() *rundir.Recorder {
	var ru unix.Rusage
	if err := c.read(&ru); err != nil {
		return nil
	}
	rec := &rundir.Recorder{MaxRSSKiB: ru.Maxrss, UserNS: unix.TimevalToNsec(ru.Utime), SystemNS: unix.TimevalToNsec(ru.Stime)}
	if rel, exit := c.atRelease, c.atExit; rel.cpuNS > 0 && exit.cpuNS >= rel.cpuNS {
		rec.BeforeNS, rec.WhileNS = rel.cpuNS, exit.cpuNS-rel.cpuNS
		w := exit.wakes - rel.wakes
		rec.WakesWhile = &w
	}
	return rec
}
