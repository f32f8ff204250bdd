package recorder

import "github.com/iocorr/iocorr/rundir"

// ParseProbes reads --probe (rundir.ParseProbeSet); a name it does not
// know is an *OptionError.
func ParseProbes(s string) (rundir.ProbeSet, error) {
	p, err := rundir.ParseProbeSet(s)
	if err != nil {
		return p, &OptionError{err.Error()}
	}
	return p, nil
}
