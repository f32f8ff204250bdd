package main

import (
	"context"
	"fmt"

	"github.com/iocorr/iocorr/pipeline"
)

// buildStore runs the ingest that turns the spool into the query store.
func buildStore(ctx context.Context, dir string) error {
	sum, err := pipeline.Ingest(ctx, dir, pipeline.Options{})
	if err != nil {
		return fmt.Errorf("building the query store (run `iocorr ingest %s` to retry): %w", dir, err)
	}
	printBuildSummary(sum, dir)
	return nil
}
