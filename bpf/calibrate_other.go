//go:build !amd64 && !arm64

package bpf

import "reflect"

// On these architectures the calibration targets are Go, whose first
// instructions are the compiler's to choose (see calibrate_target.go):
// both measure whatever the kernel does with them.
//
//go:noinline
func calibrationTarget(x uint64) uint64 { return x*0x9e3779b97f4a7c15 + 1 }

//go:noinline
func calibrationStepped(x uint64) uint64 { return x*0x9e3779b97f4a7c15 + 1 }

func calibrationPCs() (target, stepped uintptr) {
	return reflect.ValueOf(calibrationTarget).Pointer(), reflect.ValueOf(calibrationStepped).Pointer()
}
