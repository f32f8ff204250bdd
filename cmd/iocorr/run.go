package main

import (
	"fmt"

	"github.com/iocorr/iocorr/index"
	"github.com/iocorr/iocorr/rundir"
)

// openRunMeta opens DIR's store and reads its metadata, for the commands
// that need both (the status goes to stderr as with openRun).
func openRunMeta(dir string) (*index.Store, *rundir.Meta, error) {
	st, _, err := openRun(dir)
	if err != nil {
		return nil, nil, err
	}
	meta, err := rundir.ReadMeta(dir)
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	return st, meta, nil
}

// openRun opens DIR's store and its run status (rundir.Meta.Status: ""
// for a run recorded to its end), which it also prints on stderr.
func openRun(dir string) (*index.Store, string, error) {
	st, err := index.Open(dir)
	if err != nil {
		return nil, "", err
	}
	meta, err := rundir.ReadMeta(dir)
	if err != nil {
		st.Close()
		return nil, "", err
	}
	status := meta.Status()
	if status != "" {
		fmt.Fprintf(stderr, "iocorr: warning: %s\n", status)
	}
	return st, status, nil
}
