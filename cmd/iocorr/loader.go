//go:build linux && !noloader

package main

import (
	"github.com/iocorr/iocorr/doctor"
	"github.com/iocorr/iocorr/internal/launch"
	"github.com/iocorr/iocorr/pin"
	"github.com/iocorr/iocorr/prefetch"
)

// runShimIfChild makes the held child of `record` the traced command, and
// a pin plan's holder process the holder, the prefetcher's helper the
// helper, doctor's prefetch-cost probe the probe.
func runShimIfChild() {
	launch.RunShimIfChild()
	pin.RunHolderIfChild()
	prefetch.RunHelperIfChild()
	doctor.RunCostProbeIfChild()
}
