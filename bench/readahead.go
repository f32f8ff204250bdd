package bench

import (
	"cmp"
	"fmt"
)

// readaheadPairCount is how many pairs hold plan's read-ahead advice to
// the runs: three, for a median of three a figure (one in short mode).
func readaheadPairCount(cfg Config) int {
	if cfg.Short {
		return 1
	}
	return 3
}

// readaheadPairs holds plan's read-ahead advice of a prefetch case's
// traced plain run to plain runs: where it advises a read_ahead_kb,
// interleaved pairs of plain runs at the disk's own and at the advised
// one. The advice must pay as plan's threshold says (1.1× the decode
// tokens/s), and predict's kernel tokens/s at the advised window (the
// read-around twice it), in the mode nearest the traced run, must be
// within 15% of the measured. Where it advises none, its reason is
// logged and the advised read_ahead_kb is 0.
func readaheadPairs(r *Report, cfg Config, name, model, budget string, bf before) {
	const what = ": plan's advised read_ahead_kb (0: none)"
	adv := bf.readahead
	if adv == nil {
		r.NA(prefetchSection, name+what, "KiB", cmp.Or(bf.why, "the plan carries no read-ahead advice"))
		return
	}
	logf(cfg, "prefetch %s: plan's read-ahead advice: %s", name, adv.Reason)
	r.Add(prefetchSection, name+what, "KiB", []float64{float64(adv.KB)}, "")
	if adv.KB == 0 {
		return
	}
	argv := cfg.completionArgv(model)
	var own, at []prefetchRun
	var failed error
	for i := range readaheadPairCount(cfg) {
		for k := range 2 {
			if (i+k)%2 == 0 {
				run, err := again(cfg, func() (prefetchRun, error) { return plainPrefetchRun(cfg, argv, model, budget) })
				if err != nil {
					failed = err
					continue
				}
				own = append(own, run)
				continue
			}
			restore, err := setReadAhead(cfg, model, int(adv.KB))
			if err != nil {
				failed = err
				continue
			}
			run, err := again(cfg, func() (prefetchRun, error) { return plainPrefetchRun(cfg, argv, model, budget) })
			if rerr := restore(); rerr != nil {
				// Every run after would be at the advised read-ahead.
				r.NA(prefetchSection, name+": read_ahead_kb put back after the advised runs", "", rerr.Error())
				return
			}
			if err != nil {
				failed = err
				continue
			}
			at = append(at, run)
		}
	}
	var tps, read, pred []float64
	for i := range min(len(own), len(at)) {
		tps = append(tps, at[i].tps/own[i].tps)
		if own[i].read > 0 {
			read = append(read, at[i].read/own[i].read)
		}
	}
	why := "no pair measured"
	if failed != nil {
		why = orNA(failed)
	}
	r.Add(prefetchSection, name+": plain at the advised read-ahead ÷ at the disk's own, decode tokens/s", "ratio", tps, why)
	r.goal(">=", 1.1, "median")
	r.Add(prefetchSection, name+": plain at the advised read-ahead ÷ at the disk's own, bytes the disk read", "ratio", read, why)
	predWhy := "predict's figure is NA"
	rows, err := predictRows(cfg, bf.dir, []string{budget}, "", "--readahead", fmt.Sprintf("%dKiB", 2*adv.KB))
	if err != nil {
		predWhy = orNA(err)
	}
	for _, row := range rows {
		if row.Policy == "kernel" && row.Phase == "decode" && row.Mode == bf.mode && row.TPS != nil {
			for _, x := range at {
				pred = append(pred, *row.TPS/x.tps)
			}
		}
	}
	if bf.mode == "" {
		predWhy = cmp.Or(bf.why, "no mode of the traced run was found")
	}
	r.Add(prefetchSection, name+": predict's kernel tokens/s at the advised read-ahead ÷ measured", "ratio", pred, predWhy)
	r.goalWithin(0.85, 1.15, "median")
}
