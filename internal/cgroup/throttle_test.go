package cgroup

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The limit is set in this process's own blkio cgroup (what its children
// stay in, whatever memory cgroup a run makes) and lifted by the function
// returned; without a v1 blkio hierarchy it is refused with the reason.
func TestThrottleReadsSetsTheLimitInOwnBlkioCgroupAndLiftsIt(t *testing.T) {
	tests := []struct {
		name, self, own string
		wantErr         string
	}{
		{"in the root blkio cgroup", "12:blkio:/\n0::/\n", "/", ""},
		{"in a job's blkio cgroup, with another controller beside", "5:cpu,blkio:/ci/job\n0::/ci/job\n", "/ci/job", ""},
		{"cgroup v2 only", "0::/user.slice\n", "", "no cgroup v1 blkio hierarchy"},
	}
	const dev = "254:0"
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			self := filepath.Join(t.TempDir(), "cgroup")
			os.WriteFile(self, []byte(tc.self), 0o644)
			defer func(b, pc string) { cgroupV1Blkio, procCgroup = b, pc }(cgroupV1Blkio, procCgroup)
			cgroupV1Blkio, procCgroup = root, self
			file := filepath.Join(root, tc.own, "blkio.throttle.read_bps_device")
			if tc.own != "" {
				os.MkdirAll(filepath.Dir(file), 0o755)
			}

			lift, rule, err := ThrottleReads(dev, 300e6)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(file); string(b) != "254:0 300000000" {
				t.Errorf("%s = %q, want the disk's limit", file, b)
			}
			if want := "254:0 300000000 in " + file; rule != want {
				t.Errorf("rule %q, want %q", rule, want)
			}
			if err := lift(); err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(file); string(b) != "254:0 0" {
				t.Errorf("after the lift %s = %q, want the rule removed (0)", file, b)
			}
		})
	}
}
