package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// cgroupV1Blkio is the v1 blkio hierarchy, overridable in tests.
var cgroupV1Blkio = "/sys/fs/cgroup/blkio"

// ThrottleReads limits the reads that this process's v1 blkio cgroup (and
// what it starts, which stays in it: a memory cgroup of a run is another
// hierarchy) issues to whole disk dev ("major:minor") to bps bytes a second, with the
// blk-throttle controller, and returns what lifts the limit. A loop
// device's reads of its backing file are charged to the cgroup of the
// request they serve, so a file system on a loop device over a file on
// dev becomes a disk that serves bps: the slow SSD or eMMC of an edge
// board, on a machine whose disk is fast. cgroup v2 is refused: a run's
// cgroup is made beside iocorr's own there, outside any limit set here.
// rule is the file and line that set it, for a caller to say how to lift
// it by hand should it be stopped before it can.
func ThrottleReads(dev string, bps int64) (lift func() error, rule string, err error) {
	if bps <= 0 {
		return nil, "", fmt.Errorf("throttling reads of %s: %d bytes a second", dev, bps)
	}
	own := ownCgroup("blkio")
	if own == "" {
		return nil, "", errors.New("throttling reads: no cgroup v1 blkio hierarchy holds this process (cgroup v2 is not supported: a run's cgroup is made beside iocorr's own, outside the limit)")
	}
	p := filepath.Join(cgroupV1Blkio, own, "blkio.throttle.read_bps_device")
	set := func(v int64) error {
		if err := os.WriteFile(p, fmt.Appendf(nil, "%s %d", dev, v), 0); err != nil {
			return fmt.Errorf("throttling reads of %s in %s: %w", dev, p, err)
		}
		return nil
	}
	if err := set(bps); err != nil {
		return nil, "", err
	}
	// 0 removes the rule.
	return func() error { return set(0) }, fmt.Sprintf("%s %d in %s", dev, bps, p), nil
}
