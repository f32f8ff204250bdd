package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/iocorr/iocorr/diff"
	"github.com/iocorr/iocorr/output"
	"github.com/iocorr/iocorr/store"
)

func init() {
	register(&command{
		name:    "diff",
		summary: "two runs side by side by tensor, layer, expert, op, phase, token or device: each counter in A and B, its change and ratio",
		usage:   "[--by DIM] [--tensor NAME|GLOB] [--phase prefill|decode] [--counter NAME,...] [--sort COUNTER] [--top K] [--all] [--format table|csv|json|jsonl] A B",
		flags:   diffFlags,
		man:     diffManual,
	})
}

func diffFlags(fs *pflag.FlagSet) func(ctx context.Context, args []string) error {
	// perf diff takes its flags before or after the two runs.
	fs.SetInterspersed(true)
	var o diff.Options
	fs.StringVar(&o.By, "by", "tensor", "group by "+strings.Join(store.GroupBys, "|")+" (tensors by name, so runs of different models compare)")
	fs.StringVar(&o.Tensor, "tensor", "", "only tensors of this name or glob, in both runs")
	fs.StringVar(&o.Phase, "phase", "", "prefill, decode or none")
	fs.StringSliceVar(&o.Counters, "counter", nil, "compare only these counters (default: all, in a table those query's table shows; by expert also "+store.Selected+")")
	fs.StringVar(&o.Sort, "sort", "", "order groups by the size of this counter's change, largest first")
	fs.IntVar(&o.Top, "top", 0, "keep the first K groups")
	fs.BoolVar(&o.Pseudos, "all", false, "include [other file], [anonymous] and [model header] without --tensor")
	format := formatFlag(fs)
	return func(ctx context.Context, args []string) error {
		if len(args) != 2 {
			return usagef("diff: want two run directories, A (the baseline) and B, got %d arguments", len(args))
		}
		if o.Top < 0 {
			return usagef("diff: --top must not be negative")
		}
		if *format == output.Table && len(o.Counters) == 0 {
			// A table shows what query's table shows; the other
			// formats carry every counter.
			o.Counters = diff.TableCounters(o.By)
		}
		var runs [2]diff.Run
		for i, dir := range args {
			run, err := openRunOf("AB"[i:i+1], dir)
			if err != nil {
				return fmt.Errorf("diff: %w", err)
			}
			defer run.Close()
			runs[i] = *run
		}
		res, err := diff.Compare(runs[0], runs[1], o)
		if err != nil {
			return fmt.Errorf("diff: %w", err)
		}
		if o.By == "device" {
			// A device group of no buffer name is the weights' own, but
			// where they lived was not measured: say why, of each run.
			for i, r := range runs {
				na := r.Store.DevicesNA()
				for _, d := range slices.Sorted(maps.Keys(na)) {
					fmt.Fprintf(stderr, "iocorr: note: run %s: device %s: %s\n", "AB"[i:i+1], d, na[d])
				}
			}
		}
		if *format != output.Table {
			for _, only := range []struct {
				run   string
				names []string
			}{{"A", res.OnlyA}, {"B", res.OnlyB}} {
				if len(only.names) > 0 {
					fmt.Fprintf(stderr, "iocorr: note: %s\n", output.OnlyIn(only.run, only.names))
				}
			}
		}
		return output.Diff(stdout, res, *format)
	}
}

// openRunOf opens one run of two (name A or B) and says on stderr which
// one is partial, when one is.
func openRunOf(name, dir string) (*store.Run, error) {
	return openRun(dir, fmt.Sprintf("run %s (%s)", name, dir))
}
