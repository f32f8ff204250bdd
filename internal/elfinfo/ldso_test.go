package elfinfo_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/internal/elfinfo"
	"github.com/iocorr/iocorr/testkit/llmtest"
)

// The dynamic loader is the oracle: ldd lists what a binary loads.
func TestNeededLibsAgreesWithTheDynamicLoader(t *testing.T) {
	for _, bin := range []string{"/bin/ls", filepath.Join(llmtest.LibDir(), "llama-addon.node")} {
		t.Run(filepath.Base(bin), func(t *testing.T) {
			if _, err := os.Stat(bin); err != nil {
				t.Fatalf("%s: %v", bin, err)
			}
			out, err := exec.Command("ldd", bin).Output()
			if err != nil {
				t.Fatalf("ldd %s: %v", bin, err)
			}
			var want []string
			for _, line := range strings.Split(string(out), "\n") {
				if _, p, ok := strings.Cut(line, "=> "); ok {
					p = strings.Fields(p)[0]
					if real, err := filepath.EvalSymlinks(p); err == nil {
						want = append(want, real)
					}
				}
			}
			got := elfinfo.NeededLibs(bin)
			sort.Strings(want)
			sort.Strings(got)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("NeededLibs:\n%s\nldd:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}
