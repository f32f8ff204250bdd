package proc

import (
	"os"
	"testing"
)

func TestHostInfoDescribesThisMachine(t *testing.T) {
	h := HostInfo()
	if h.Kernel == "" || h.NumCPU < 1 || h.MemTotal == 0 || h.PageSize != os.Getpagesize() {
		t.Fatalf("%+v", h)
	}
}
