package main

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/output"
)

func init() {
	register(&command{
		name:    "inspect",
		summary: "show a GGUF model's metadata and where each tensor lies in the file",
		usage:   "[--format table|csv|json|jsonl] [--metadata] MODEL.gguf",
		flags:   inspectFlags,
		man:     inspectManual,
	})
}

func inspectFlags(fs *pflag.FlagSet) func(context.Context, []string) error {
	format := formatFlag(fs)
	showMeta := fs.Bool("metadata", false, "also list every metadata key and value (table format)")
	return func(ctx context.Context, args []string) error {
		if len(args) != 1 {
			return usagef("inspect: want exactly one model file, got %d arguments", len(args))
		}
		path := args[0]
		m, err := gguf.OpenModel(path)
		if err != nil {
			return fmt.Errorf("inspect %s: %w", path, err)
		}
		return output.Model(stdout, m, *format, *showMeta)
	}
}
