//go:build linux && !noloader

package main

import (
	"github.com/iocorr/iocorr/internal/launch"
	"github.com/iocorr/iocorr/pin"
)

// runShimIfChild makes the held child of `record` the traced command, and
// a pin plan's holder process the holder.
func runShimIfChild() {
	launch.RunShimIfChild()
	pin.RunHolderIfChild()
}
