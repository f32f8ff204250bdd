//go:build linux

package main

import (
	"testing"

	"github.com/iocorr/iocorr/testkit/rectest"
)

// record re-executes its own binary as the held child; in tests that
// binary is the test binary, which must then become the command.
func TestMain(m *testing.M) { rectest.Main(m) }
