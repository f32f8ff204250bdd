package rundir

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ResidencyFile holds the recorder's page-cache residency snapshots of the
// model files, one JSON object (a Snapshot) per line, in the order taken.
const ResidencyFile = "residency.jsonl"

// Snapshot is the page-cache residency of the model files as the recorder
// saw it through cachestat(2) or mincore (SnapshotStats.Method), soon after a token
// began: no BPF program and no work in the traced process. The recorder
// learns of a token from its llama_decode record in the ring buffer, so
// the snapshot is taken LagNS() after the token's start, not at it; the
// page cache may change in between (a fault's readahead, reclaim).
type Snapshot struct {
	// Token is the token (llama_decode call) whose start the recorder saw;
	// MarkNS its start, CLOCK_MONOTONIC as every event's time.
	Token  uint32 `json:"token"`
	MarkNS uint64 `json:"mark_ns"`
	// StartNS and EndNS bracket the mincore calls: each page was looked
	// at once between them.
	StartNS uint64 `json:"start_ns"`
	EndNS   uint64 `json:"end_ns"`
	// Models are the resident pages of each model file, by its index in
	// Meta.Models (models found later are absent from earlier snapshots);
	// nil where mincore failed.
	Models []*PageMap `json:"models"`
	// Held snapshots (exact ones) were taken with their process stopped
	// at the token's start: the page cache at the start itself.
	Held bool `json:"held,omitempty"`
	// FlushedNS is when, after EndNS, the kernel's pending page-cache
	// runs had been put in the ring: every page-cache event before EndNS
	// is recorded no later than it. 0 where the run records no page-cache
	// runs (the default tier), the flush failed, or an older iocorr
	// recorded the run.
	FlushedNS uint64 `json:"flushed_ns,omitempty"`
}

// LagNS is how long after the token's start the snapshot began.
func (s *Snapshot) LagNS() uint64 {
	if s.StartNS < s.MarkNS {
		return 0
	}
	return s.StartNS - s.MarkNS
}

// ReadSnapshots reads DIR's residency snapshots; a run without the file
// (recorded before snapshots) has none, which is not an error. A last line
// cut short by a recorder that died is dropped.
func ReadSnapshots(dir string) ([]Snapshot, error) {
	f, err := os.Open(filepath.Join(dir, ResidencyFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading residency snapshots: %w", err)
	}
	defer f.Close()
	var out []Snapshot
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	for sc.Scan() {
		var s Snapshot
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			if !sc.Scan() {
				break // the last line, cut short
			}
			return nil, fmt.Errorf("%s: snapshot %d: %w", ResidencyFile, len(out)+1, err)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading residency snapshots: %w", err)
	}
	return out, nil
}

// Has reports whether page p is in the map.
func (pm *PageMap) Has(p int64) bool {
	lo, hi := 0, len(pm.Ranges)
	for lo < hi {
		m := (lo + hi) / 2
		switch r := pm.Ranges[m]; {
		case p < r[0]:
			hi = m
		case p >= r[1]:
			lo = m + 1
		default:
			return true
		}
	}
	return false
}

// SnapshotStats says how many token starts got a residency snapshot, and
// why the others did not (Meta.ResidencySnapshots).
type SnapshotStats struct {
	Taken uint64 `json:"taken"`
	// Throttled token starts came while the recorder kept to its budget
	// (a snapshot waits 1/DutyShare times the last one's duration after it).
	Throttled uint64 `json:"throttled"`
	// DutyShare is the share of the run's time the snapshots kept to;
	// 0 in runs recorded before it was written (they kept to 0.02).
	DutyShare float64 `json:"duty_share,omitempty"`
	// Replaced token starts were followed by the next before the
	// snapshotter could take them.
	Replaced uint64 `json:"replaced"`
	// BusyNS is the recorder's time spent taking them.
	BusyNS uint64 `json:"busy_ns"`
	// Method is how they read the page cache: "cachestat" (cachestat(2)
	// of the model's descriptor, Linux 6.5+) or "mincore" (of a read-only
	// mapping, where the kernel has no cachestat); empty when none was
	// taken or by an older iocorr.
	Method string `json:"method,omitempty"`
	// Exact snapshots were taken with their process stopped at the
	// token's start (record --exact-snapshots): taken at the start, for
	// every token, at the price of the pause.
	Exact bool `json:"exact,omitempty"`
	// NotHeld exact snapshots found their process running: the kernel
	// did not stop it at that token's start (its ring was over half full,
	// or the signal could not be sent), so they lag as the default's do.
	NotHeld uint64 `json:"not_held,omitempty"`
}

// NoSnapshotNA says why a token has no snapshot of its own.
func (s *SnapshotStats) NoSnapshotNA() string {
	return s.noSnapshot("at this token's start")
}

// NoDecodeSnapshotNA says why a figure over the decode tokens' picks (the
// real expert hit rate) is NA: no decode token with picks had a snapshot.
func (s *SnapshotStats) NoDecodeSnapshotNA() string {
	return s.noSnapshot("at the start of any decode token with router picks")
}

func (s *SnapshotStats) noSnapshot(where string) string {
	if s == nil {
		return "not measured: this run has no residency snapshots (recorded by an older iocorr)"
	}
	duty := s.DutyShare
	if duty == 0 {
		duty = 0.02
	}
	return fmt.Sprintf("not measured: no residency snapshot %s (the recorder took %d, keeping to %g%% of the run's time: %d token starts came too soon after one, %d before it had taken the previous; record --probe pagecache replays every token)", where, s.Taken, duty*100, s.Throttled, s.Replaced)
}
