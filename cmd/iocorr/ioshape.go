package main

import (
	"fmt"

	"github.com/iocorr/iocorr/output"
	"github.com/iocorr/iocorr/stats"
	"github.com/iocorr/iocorr/store"
)

// tokenShape is the run's I/O shape per token (stats.IOShape) for the
// per-token outputs, its NA reasons said on stderr.
func tokenShape(run *store.Run) (*output.TokenFigures, error) {
	_, byToken, err := stats.IOShape(run)
	if err != nil {
		return nil, err
	}
	figs, err := output.NewTokenFigures(byToken)
	if err != nil {
		return nil, err
	}
	for _, n := range figs.NA.Notes("") {
		fmt.Fprintf(stderr, "iocorr: note: %s\n", n)
	}
	return figs, nil
}
