//go:build linux && !noloader

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/internal/pagecache"
	"github.com/iocorr/iocorr/pin"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/llmtest"
)

// record --pin end to end: the plan's pages are locked in the command's
// cgroup before it starts and stay resident while the command reads more
// than its budget through the same cgroup; meta.json and the summary say
// what was pinned, and the cgroup's unevictable bytes are the pin.
func TestRecordPinHoldsThePlansPagesInTheCommandsCgroupThroughTheRun(t *testing.T) {
	requireBPF(t)
	toucher := llmtest.BuildToucher(t)
	model := llmtest.Model(t, gguf.SynthSpec{Layers: 2, Embd: 256, FF: 512, Heads: 4})
	f, err := gguf.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	const budget = 32 << 20
	plan, err := pin.WholeTensors(model, f.Tensors[:4], budget)
	if err != nil {
		t.Fatal(err)
	}
	// The pinned pages, first and last of each range: the toucher touches
	// them after the pressure, and a page the reclaim took would fault.
	var pages []string
	for _, r := range plan.Ranges {
		pages = append(pages, strconv.FormatInt(r.Offset/kernel.PageSize, 10), strconv.FormatInt((r.Offset+r.Length-1)/kernel.PageSize, 10))
	}
	planFile := filepath.Join(t.TempDir(), "plan.json")
	if err := plan.Write(planFile); err != nil {
		t.Fatal(err)
	}
	// Twice the budget, cold, read by the command through its cgroup:
	// reclaim takes every page it may.
	pressure := filepath.Join(t.TempDir(), "pressure")
	if err := os.WriteFile(pressure, make([]byte, 2*budget), 0o644); err != nil {
		t.Fatal(err)
	}
	if res, _, err := pagecache.Evict(pressure); err != nil || res > 0 {
		t.Fatalf("evicting the pressure file: %d pages stayed, %v", res, err)
	}

	dir := filepath.Join(t.TempDir(), "run")
	script := fmt.Sprintf("cat %s %s >/dev/null && exec %s -file %s -pages %s", model, pressure, toucher, model, strings.Join(pages, ","))
	out, errOut, err := runCmd(t, "record", "-o", dir, "--cold", "--probe", "pagecache", "--mem-limit", "32MiB", "--pin", planFile, "--model", model, "--", "sh", "-c", script)
	if err != nil {
		t.Fatalf("record --pin: %v\n%s", err, errOut)
	}
	var rep llmtest.ToucherReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("the toucher's report %q: %v", out, err)
	}
	// mincore after the pressure, at the command's end: the pinned pages
	// stayed, and the reclaim took most of the rest of the model (it did
	// press on what the pin holds).
	pinnedPages, filePages := int(plan.Pinned/kernel.PageSize), int((f.Size+kernel.PageSize-1)/kernel.PageSize)
	if rep.Resident < pinnedPages || rep.Resident > (pinnedPages+filePages)/2 {
		t.Errorf("after the pressure %d of the model's %d pages were resident, want the pin's %d and few more", rep.Resident, filePages, pinnedPages)
	}
	// A pinned page the pressure had evicted would be a major fault of the
	// model file (MADV_RANDOM: one per page), as the recording attributes
	// it; the toucher's own majflt also counts its binary's text, which the
	// host may have paged out.
	mf := regexp.MustCompile(`in model files (\d+) major, (\d+) minor`).FindStringSubmatch(errOut)
	if mf == nil {
		t.Fatalf("the summary has no faults in model files:\n%s", errOut)
	}
	if mf[1] != "0" || mf[2] == "0" {
		t.Errorf("touching the pinned pages after reading %d MiB under a %d MiB budget took %s major and %s minor faults in the model: want 0 major (the pin held) and the touches seen", 2*budget>>20, budget>>20, mf[1], mf[2])
	}

	m, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	p := m.Controls.Pinned
	if p == nil {
		t.Fatal("meta.json's controls.pinned is absent")
	}
	if want := (rundir.Pinned{Plan: planFile, Model: model, Ranges: 4, Bytes: plan.Pinned, HolderAnon: p.HolderAnon}); *p != want || p.HolderAnon <= 0 {
		t.Errorf("controls.pinned %+v, want %+v with the holder's memory measured", *p, want)
	}
	key := map[int]string{1: "memory.stat.total_unevictable", 2: "memory.stat.unevictable"}[m.Controls.CgroupVer]
	if got := m.Controls.CgroupCounters[key]; got < uint64(plan.Pinned) {
		t.Errorf("the command's cgroup counted %d unevictable bytes (%s), the pin is %d: %v", got, key, plan.Pinned, m.Controls.CgroupCounters)
	}
	if !strings.Contains(errOut, "pinned") || !strings.Contains(errOut, "4 ranges of "+model) || !strings.Contains(errOut, "plan "+planFile) {
		t.Errorf("the summary does not say what was pinned:\n%s", errOut)
	}
}
