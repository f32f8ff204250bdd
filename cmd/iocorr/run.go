package main

import (
	"fmt"

	"github.com/iocorr/iocorr/store"
)

// openRun opens the run in dir (store.OpenRun) and prints its status on
// stderr when it is partial, after label when one names the run among
// several.
func openRun(dir, label string) (*store.Run, error) {
	run, err := store.OpenRun(dir)
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
