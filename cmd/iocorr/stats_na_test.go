package main

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

// stats prints its tables on stdout, NA cells and all, and why each NA
// is NA once on stderr, as query and export do: never a line of reasons
// after each table, which a program reading the tables would have to
// skip. The oracle of the reasons is stats --format json, which gives
// each NA figure's beside it.
func TestStatsSaysWhyFiguresAreNAOnceOnStderr(t *testing.T) {
	dir := defaultTierRun(t)
	out, errOut, err := runCmd(t, "stats", "-i", dir)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "NA:") {
			t.Errorf("stdout has a reason line %q", l)
		}
	}
	if !strings.Contains(out, " NA ") {
		t.Errorf("stdout shows no NA cell:\n%s", out)
	}
	// stderr: "iocorr: note: table.column, … NA: reason", a reason once.
	noted := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(errOut), "\n") {
		cols, why, ok := strings.Cut(strings.TrimPrefix(l, "iocorr: note: "), " NA: ")
		if !ok || !strings.HasPrefix(l, "iocorr: note: ") {
			t.Fatalf("stderr line %q is no note", l)
		}
		if _, again := noted[why]; again {
			t.Errorf("stderr says %q twice", why)
		}
		noted[why] = strings.Split(cols, ", ")
	}
	tables := statsTables(t, dir)
	want := map[string][]string{}
	for name, rows := range tables {
		if !strings.Contains(out, "\n## "+name+" ") {
			continue // a table the text format leaves out
		}
		for _, r := range rows {
			for k, v := range r {
				col, isReason := strings.CutSuffix(k, "_na_reason")
				if why, _ := v.(string); isReason && !slices.Contains(want[why], name+"."+col) {
					want[why] = append(want[why], name+"."+col)
				}
			}
		}
	}
	if len(want) == 0 {
		t.Fatal("stats --format json has no NA figure: the default-tier run should have some")
	}
	for why, cols := range want {
		got := slices.Sorted(slices.Values(noted[why]))
		if slices.Sort(cols); !slices.Equal(got, cols) {
			t.Errorf("reason %q: stderr names %v, json %v", why, got, cols)
		}
	}
	if len(noted) != len(want) {
		t.Errorf("stderr gives reasons %v, json %v", slices.Sorted(maps.Keys(noted)), slices.Sorted(maps.Keys(want)))
	}
}
