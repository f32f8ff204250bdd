package main

import "context"

// buildStore runs the ingest that turns the spool into the query store.
func buildStore(ctx context.Context, dir string) error {
	return nil
}
