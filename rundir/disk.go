package rundir

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/iocorr/iocorr/internal/atomicfile"
	"github.com/iocorr/iocorr/internal/kernel"
)

// DiskProfile is what `iocorr doctor --disk FILE` measured of the whole
// disk holding FILE: O_DIRECT random reads at several queue depths and
// block sizes. It is kept per disk (DiskProfilePath) and copied into the
// meta.json of a run whose models it holds, so that a run read elsewhere
// still compares its reads with its own device.
type DiskProfile struct {
	// Device is the whole disk's kernel dev_t as "major:minor" and its
	// name, e.g. "254:0 vda".
	Device string `json:"device"`
	// Model is the disk's model string from sysfs ("" when it has none,
	// as virtio disks).
	Model    string      `json:"model"`
	Measured time.Time   `json:"measured"`
	Points   []DiskPoint `json:"points"`
	// PrefetchCost is what another thread's reads in a command's memory
	// cgroup cost its compute on this machine (nil in profiles measured
	// before 2026-12-05).
	PrefetchCost *PrefetchCost `json:"prefetch_cost,omitempty"`
	// PrefetchCostNA says why a profile measured since has none (no
	// memory cgroup could be made: not root).
	PrefetchCostNA string `json:"prefetch_cost_na,omitempty"`
}

// PrefetchCost is doctor's measure of what a prefetcher's reads cost the
// command's own compute: in a memory cgroup of LimitBytes, a thread
// summing the words of RegionBytes of the disk's file mapped, Passes
// times, alone and beside a second thread that asks the kernel for the
// region ahead of it, Pairs times, the two in turn.
type PrefetchCost struct {
	// ComputeNSPerByte is the compute thread's user time added per byte
	// the second thread asked for: the pairs' median, 0 where negative.
	ComputeNSPerByte float64 `json:"compute_ns_per_byte"`
	// AskNSPerByte is the second thread's own CPU time (user and system)
	// per byte it asked for, the pairs' median: the pace of a prefetcher's
	// helper, which can bring the pages in no faster whatever the device
	// serves (0 in profiles measured before 2026-12-05, evening).
	AskNSPerByte float64 `json:"ask_ns_per_byte,omitempty"`
	RegionBytes  int64   `json:"region_bytes"`
	LimitBytes   int64   `json:"limit_bytes"`
	Passes       int     `json:"passes"`
	AloneUserNS  []int64 `json:"alone_user_ns"`
	BesideUserNS []int64 `json:"beside_user_ns"`
	AskedBytes   []int64 `json:"asked_bytes"`
	AskCPUNS     []int64 `json:"ask_cpu_ns,omitempty"`
}

// DiskPoint is one measured depth × block size: the bandwidth served and
// the mean time from a read's submission to its return.
type DiskPoint struct {
	Depth         int     `json:"depth"`
	BlockBytes    int64   `json:"block_bytes"`
	BytesPerSec   float64 `json:"bytes_per_sec"`
	MeanLatencyNs float64 `json:"mean_latency_ns"`
	// RoundsBytesPerSec is each round's bandwidth, in the order measured:
	// BytesPerSec is their median, and MeanLatencyNs that round's (nil in
	// profiles measured in one round, before 2026-12-05's evening).
	RoundsBytesPerSec []float64 `json:"rounds_bytes_per_sec,omitempty"`
}

// Spread is how far the point's rounds were apart: (highest − lowest) ÷
// the median, 0 for a point of one round.
func (p DiskPoint) Spread() float64 {
	if len(p.RoundsBytesPerSec) < 2 || p.BytesPerSec <= 0 {
		return 0
	}
	return (slices.Max(p.RoundsBytesPerSec) - slices.Min(p.RoundsBytesPerSec)) / p.BytesPerSec
}

// UnsteadySpread is the spread past which a point's rounds disagree too
// much to stand for the disk (DiskProfile.Unsteady).
const UnsteadySpread = 0.5

// Unsteady is the point whose rounds were furthest apart, where that is
// more than UnsteadySpread; nil where none was.
func (d *DiskProfile) Unsteady() *DiskPoint {
	var worst *DiskPoint
	for i := range d.Points {
		if p := &d.Points[i]; p.Spread() > UnsteadySpread && (worst == nil || p.Spread() > worst.Spread()) {
			worst = p
		}
	}
	return worst
}

// DiskProfilesEnv names the folder of disk profiles when set; tests and
// unprivileged users point it elsewhere than DiskProfilesDir.
const DiskProfilesEnv = "IOCORR_DISK_PROFILES"

// DiskProfilesDir is where doctor keeps disk profiles by default.
const DiskProfilesDir = "/var/lib/iocorr/disks"

// DiskProfilePath is the file of the profile of the whole disk dev
// (kernel encoding): DIR/MAJOR:MINOR.json.
func DiskProfilePath(dev uint32) string {
	dir := os.Getenv(DiskProfilesEnv)
	if dir == "" {
		dir = DiskProfilesDir
	}
	return filepath.Join(dir, kernel.DevString(dev)+".json")
}

// ReadDiskProfile reads the kept profile of disk dev; nil, nil when the
// disk was never measured.
func ReadDiskProfile(dev uint32) (*DiskProfile, error) {
	p := DiskProfilePath(dev)
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading disk profile: %w", err)
	}
	var d DiskProfile
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("parsing disk profile %s: %w", p, err)
	}
	return &d, nil
}

// WriteDiskProfile keeps d as disk dev's profile, replacing any older one
// whole or not at all.
func WriteDiskProfile(dev uint32, d *DiskProfile) error {
	p := DiskProfilePath(dev)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("disk profile: %w", err)
	}
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding disk profile: %w", err)
	}
	if err := atomicfile.WriteBytes(p, 0o644, true, append(b, '\n')); err != nil {
		return fmt.Errorf("disk profile: %w", err)
	}
	return nil
}

// BandwidthAt is the bandwidth the disk served at queue depth depth for
// reads of blockBytes: at each measured block size, between measured
// depths interpolated linearly and beyond them the nearest measured
// depth's; between the two measured sizes around blockBytes interpolated
// linearly in the size's logarithm, beyond them the nearest size's. ok is
// false for a profile with no points, and for a depth or block size that
// is no positive number (a span whose requests took no measurable time
// has no depth).
func (d *DiskProfile) BandwidthAt(depth float64, blockBytes float64) (bw float64, ok bool) {
	if !d.usable(depth, blockBytes) {
		return 0, false
	}
	lo, hi, f := d.sizesAround(blockBytes)
	return (1-f)*d.atSize(lo, depth) + f*d.atSize(hi, depth), true
}

// DepthGain is how many times what the disk serves at queue depth depth
// (BandwidthAt) it served at the best depth measured beyond it, for reads
// of blockBytes (the sizes around it weighed as BandwidthAt weighs them):
// 1 where no deeper point served more. ok is as BandwidthAt's.
func (d *DiskProfile) DepthGain(depth, blockBytes float64) (gain float64, ok bool) {
	at, ok := d.BandwidthAt(depth, blockBytes)
	if !ok || at <= 0 {
		return 0, false
	}
	best := func(size int64) float64 {
		b := d.atSize(size, depth)
		for _, p := range d.Points {
			if p.BlockBytes == size && float64(p.Depth) > depth {
				b = max(b, p.BytesPerSec)
			}
		}
		return b
	}
	lo, hi, f := d.sizesAround(blockBytes)
	return max((1-f)*best(lo)+f*best(hi), at) / at, true
}

// usable says whether d has points and depth and blockBytes are positive
// numbers.
func (d *DiskProfile) usable(depth, blockBytes float64) bool {
	return d != nil && len(d.Points) > 0 && depth > 0 && !math.IsInf(depth, 0) && blockBytes > 0 && !math.IsInf(blockBytes, 0)
}

// sizesAround are the measured block sizes around blockBytes, the
// smaller and the larger, and the larger's weight by the logarithm of the
// sizes; at or beyond the measured sizes' ends both are the nearest.
func (d *DiskProfile) sizesAround(blockBytes float64) (lo, hi int64, f float64) {
	for _, p := range d.Points {
		s := p.BlockBytes
		if float64(s) <= blockBytes && (lo == 0 || s > lo) {
			lo = s
		}
		if float64(s) >= blockBytes && (hi == 0 || s < hi) {
			hi = s
		}
	}
	switch {
	case lo == 0:
		return hi, hi, 0
	case hi == 0 || hi == lo:
		return lo, lo, 0
	}
	return lo, hi, math.Log(blockBytes/float64(lo)) / math.Log(float64(hi)/float64(lo))
}

// atSize is the bandwidth at depth of reads of size, a measured size:
// between measured depths interpolated linearly, beyond them the nearest
// measured depth's.
func (d *DiskProfile) atSize(size int64, depth float64) float64 {
	var lo, hi *DiskPoint
	for i := range d.Points {
		p := &d.Points[i]
		if p.BlockBytes != size {
			continue
		}
		if float64(p.Depth) <= depth && (lo == nil || p.Depth > lo.Depth) {
			lo = p
		}
		if float64(p.Depth) >= depth && (hi == nil || p.Depth < hi.Depth) {
			hi = p
		}
	}
	switch {
	case lo == nil:
		return hi.BytesPerSec
	case hi == nil || hi.Depth == lo.Depth:
		return lo.BytesPerSec
	}
	f := (depth - float64(lo.Depth)) / float64(hi.Depth-lo.Depth)
	return lo.BytesPerSec + f*(hi.BytesPerSec-lo.BytesPerSec)
}

// ReadLatency is what a read at queue depth 1 takes before its bytes,
// in ns: the intercept, at size 0, of the read time against the size
// through the two smallest sizes measured at depth 1 (each its mean
// latency, else its size over its bandwidth). The lab's virtio disk
// answers 6 µs (68 µs for 128 KiB, 500 for 1 MiB), its disk made to take
// 2 ms a read 2.4 ms. With one size measured, that size's whole read
// time (an upper bound). ok is false without a depth-1 point.
func (d *DiskProfile) ReadLatency() (ns float64, ok bool) {
	if d == nil {
		return 0, false
	}
	at := map[int64]float64{} // size → depth-1 read time
	for _, p := range d.Points {
		switch {
		case p.Depth != 1 || p.BlockBytes <= 0:
		case p.MeanLatencyNs > 0:
			at[p.BlockBytes] = p.MeanLatencyNs
		case p.BytesPerSec > 0:
			at[p.BlockBytes] = float64(p.BlockBytes) / p.BytesPerSec * 1e9
		}
	}
	sizes := slices.Sorted(maps.Keys(at))
	switch len(sizes) {
	case 0:
		return 0, false
	case 1:
		return at[sizes[0]], true
	}
	s0, s1 := float64(sizes[0]), float64(sizes[1])
	perByte := max((at[sizes[1]]-at[sizes[0]])/(s1-s0), 0)
	return max(at[sizes[0]]-s0*perByte, 0), true
}

// NoPace says why a prefetch cost has no helper pace.
const NoPace = "the disk profile's prefetch cost has no helper pace: it was measured before iocorr doctor --disk measured one (2026-12-05)"

// Prefetch is the prefetch cost the profile measured, or nil and why it
// has none (no profile, or one without the cost).
func (d *DiskProfile) Prefetch() (*PrefetchCost, string) {
	switch {
	case d == nil:
		return nil, "no disk profile: run iocorr doctor --disk FILE"
	case d.PrefetchCost != nil:
		return d.PrefetchCost, ""
	case d.PrefetchCostNA != "":
		return nil, "the disk profile has no prefetch cost: " + d.PrefetchCostNA
	}
	return nil, "the disk profile has no prefetch cost: it was measured before iocorr doctor --disk measured one (2026-12-05)"
}

// DiskNA says why the run has no figure of its device's own bandwidth
// ("" when it has one).
func (m *Meta) DiskNA() string {
	if m.Disk == nil || len(m.Disk.Points) == 0 {
		return "no disk profile: run iocorr doctor --disk FILE"
	}
	return ""
}
