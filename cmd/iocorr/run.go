package main

import (
	"fmt"

	"github.com/iocorr/iocorr/index"
)

// openRun opens the run in dir (index.OpenRun) and prints its status on
// stderr when it is partial, after label when one names the run among
// several.
func openRun(dir, label string) (*index.Run, error) {
	run, err := index.OpenRun(dir)
	if err != nil {
		return nil, err
	}
	if status := run.Meta.Status(); status != "" {
		if label != "" {
			status = label + ": " + status
		}
		fmt.Fprintf(stderr, "iocorr: warning: %s\n", status)
	}
	return run, nil
}
