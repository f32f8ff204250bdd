package bench

import (
	"io"
	"slices"
	"testing"

	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/testkit/storetest"
)

func TestOnDemandSectionsRunOnlyWhenNamed(t *testing.T) {
	for _, c := range []struct {
		sections []string
		section  string
		want     bool
	}{
		{nil, "overhead", true},
		{nil, "a3b", false},
		{[]string{"a3b"}, "a3b", true},
		{[]string{"a3b"}, "overhead", false},
		{[]string{"scale", "a3b"}, "scale", true},
	} {
		if got := (Config{Sections: c.sections}).runs(c.section); got != c.want {
			t.Errorf("sections %v: runs(%q) = %v, want %v", c.sections, c.section, got, c.want)
		}
	}
}

// Given a recorded run (--a3b-run), the a3b section records nothing and
// measures every analysis command on it, each in a child: the ingest
// first, a query by every grouping, stats, the report and every export,
// each with its peak RSS judged against the bound and its time.
func TestTheA3BSectionMeasuresEveryAnalysisCommandOnAGivenRun(t *testing.T) {
	dir := t.TempDir()
	storetest.WriteSynthRun(t, dir, 20_000, 8, storetest.SmallShape)
	r := &Report{}
	A3B(r, Config{Iocorr: buildIocorr(t), WorkDir: t.TempDir(), A3BRun: dir, Log: io.Discard})
	figs := map[string]Figure{}
	for _, f := range r.Figures {
		figs[f.Name] = f
	}
	cmds := a3bCommands()
	if cmds[0].name != "ingest" {
		t.Errorf("the first command is %s, want the ingest the others read", cmds[0].name)
	}
	for _, by := range store.GroupBys {
		if !slices.ContainsFunc(cmds, func(c scaleCommand) bool { return c.name == "query --by "+by }) {
			t.Errorf("no query by %s", by)
		}
	}
	for _, c := range cmds {
		rss, secs := figs[c.name+" peak RSS"], figs[c.name+" time"]
		if rss.NA != "" || rss.Median <= 0 || rss.Target == nil || rss.Target.Met == nil || !*rss.Target.Met {
			t.Errorf("%s: peak RSS %+v, want measured and within %d MiB", c.name, rss, scaleBound)
		}
		if secs.NA != "" || secs.Median <= 0 {
			t.Errorf("%s: time %+v, want measured", c.name, secs)
		}
	}
	if f, ok := figs["record wall time, meta.json's start to end"]; !ok || f.NA != "" {
		t.Errorf("record wall time %+v, want the meta's", f)
	}
	// The synthetic run's meta has no start and end: the share is NA, not
	// a division by zero.
	if f := figs["ingest time / record wall time"]; f.NA == "" {
		t.Errorf("ingest share %+v, want NA", f)
	}
}
