package kernel_test

import (
	"testing"

	"github.com/iocorr/iocorr/internal/kernel"
)

func TestDevicesSplitAndJoinAsTheKernelEncodesThem(t *testing.T) {
	tests := []struct {
		major, minor uint32
		dev          uint32
	}{
		{0, 0, 0},
		{254, 0, 254 << 20},
		{8, 17, 8<<20 | 17},
		{259, 1, 259<<20 | 1},
		{0xfff, 0xfffff, 0xffffffff},
	}
	for _, tc := range tests {
		if got := kernel.Dev(tc.major, tc.minor); got != tc.dev {
			t.Errorf("kernel.Dev(%d, %d) = %#x, want %#x", tc.major, tc.minor, got, tc.dev)
		}
		if kernel.DevMajor(tc.dev) != tc.major || kernel.DevMinor(tc.dev) != tc.minor {
			t.Errorf("%#x splits into %d:%d, want %d:%d", tc.dev, kernel.DevMajor(tc.dev), kernel.DevMinor(tc.dev), tc.major, tc.minor)
		}
	}
}
