// Command iocorr-bench measures what recording llama.cpp with iocorr
// costs and how faithful the record is (issue 8's `make bench`): it prints
// one table and writes it as JSON. Run it as root from the repository.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/iocorr/iocorr/bench"
	"github.com/iocorr/iocorr/internal/launch"
	"github.com/iocorr/iocorr/testkit/llmtest"
)

func main() {
	// The untraced runs are launched held, as iocorr record launches its
	// command: this binary re-executes itself as the launcher.
	launch.RunShimIfChild()
	var cfg bench.Config
	var memMiB int64
	var out string
	pflag.StringVar(&cfg.Iocorr, "iocorr", "bin/iocorr", "the iocorr binary to measure")
	pflag.StringVar(&cfg.LlamaBench, "llama-bench", "", "llama.cpp's llama-bench (default: the shared build of scripts/build-llama.sh)")
	pflag.StringVar(&cfg.WorkDir, "workdir", ".scratch/bench", "directory for the model and the recorded runs (kept)")
	pflag.IntVar(&cfg.Pairs, "pairs", 7, "interleaved untraced/traced rounds per arm")
	pflag.IntVar(&cfg.Tokens, "tokens", 16, "tokens llama-bench generates per run under the memory limit (-n)")
	pflag.IntVar(&cfg.RAMTokens, "ram-tokens", 128, "tokens llama-bench generates per run in RAM (-n)")
	pflag.IntVar(&cfg.Threads, "threads", 2, "llama-bench threads (-t)")
	pflag.Int64Var(&memMiB, "mem-limit-mib", 128, "memory limit of the cold arm, MiB")
	pflag.BoolVar(&cfg.Short, "short", false, "prove it works: 1 round, 4 tokens, the 1 M-event store, scale runs of 2 and 4 tokens")
	pflag.IntSliceVar(&cfg.ScaleTokens, "scale-tokens", []int{64, 256}, "run lengths of the scale section (llama-bench -n), shortest first")
	pflag.StringSliceVar(&cfg.Sections, "section", nil, "run only these sections: "+strings.Join(bench.Sections, ", ")+" (default all but the on-demand "+strings.Join(bench.OnDemand, ", ")+")")
	pflag.StringSliceVar(&cfg.Arms, "arm", nil, "run only these overhead arms, by letter or name (default all)")
	pflag.StringSliceVar(&cfg.PrefetchCases, "prefetch-case", nil, "run only the prefetch cases whose names hold one of these (default all)")
	pflag.StringVar(&cfg.A3BRun, "a3b-run", "", "a3b: measure the analysis commands on this recorded run directory (its store is rebuilt) instead of recording one")
	pflag.StringVarP(&out, "output", "o", "bench.json", "JSON file to write the table to")
	pflag.Parse()
	if cfg.Short {
		cfg.Pairs, cfg.Tokens, cfg.RAMTokens = 1, 4, 4
		cfg.ScaleTokens = []int{2, 4}
	}
	cfg.MemLimit = memMiB << 20
	cfg.Log = os.Stderr
	if err := setup(&cfg); err != nil {
		fmt.Fprintf(os.Stderr, "iocorr-bench: %v\n", err)
		os.Exit(1)
	}
	rep := bench.Run(cfg)
	if err := rep.WriteTable(os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "iocorr-bench: %v\n", err)
		os.Exit(1)
	}
	if err := rep.WriteJSON(out); err != nil {
		fmt.Fprintf(os.Stderr, "iocorr-bench: writing %s: %v\n", out, err)
		os.Exit(1)
	}
}

// setup fills in what the flags left to defaults and checks it is there.
func setup(cfg *bench.Config) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root (BPF, memory cgroups, page-cache eviction)")
	}
	for _, s := range cfg.Sections {
		if !slices.Contains(bench.Sections, s) {
			return fmt.Errorf("--section %s: no such section (%s)", s, strings.Join(bench.Sections, ", "))
		}
	}
	if cfg.Pairs < 1 || cfg.Tokens < 1 || cfg.RAMTokens < 1 || cfg.Threads < 1 || cfg.MemLimit <= 0 {
		return fmt.Errorf("--pairs, --tokens, --ram-tokens, --threads and --mem-limit-mib must be positive")
	}
	root, err := llmtest.Root()
	if err != nil {
		return err
	}
	cfg.Repo = root
	if cfg.LlamaBench == "" {
		dir, err := llmtest.BuildDir(llmtest.Shared)
		if err != nil {
			return fmt.Errorf("finding llama-bench: %w (run make setup)", err)
		}
		cfg.LlamaBench = filepath.Join(dir, "llama-bench")
	}
	for _, p := range []*string{&cfg.Iocorr, &cfg.LlamaBench, &cfg.WorkDir} {
		if *p, err = filepath.Abs(*p); err != nil {
			return err
		}
	}
	if cfg.A3BRun != "" {
		if cfg.A3BRun, err = filepath.Abs(cfg.A3BRun); err != nil {
			return err
		}
	}
	for _, p := range []string{cfg.Iocorr, cfg.LlamaBench} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%w (run make setup build)", err)
		}
	}
	cfg.Sched = bench.ProbeSetExists(cfg.Iocorr, "sched")
	return nil
}
