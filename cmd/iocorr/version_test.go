package main

import (
	"runtime/debug"
	"testing"
)

// A binary says the version the Makefile stamped; built by go install or
// go build, the module version or the commit the go command recorded.
func TestVersionIsStampedElseWhatTheGoCommandRecorded(t *testing.T) {
	vcs := func(rev, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	for _, tc := range []struct {
		name, stamped string
		info          *debug.BuildInfo // nil: no build info
		want          string
	}{
		{"stamped by make", "v0.3.0-4-gabc1234", &debug.BuildInfo{Main: debug.Module{Version: "v0.3.0"}}, "v0.3.0-4-gabc1234"},
		{"go install module@version", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.3.0"}}, "v0.3.0"},
		{"go build in a clean checkout", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("0123456789abcdef0123", "false")}, "0123456789ab"},
		{"go build in a modified checkout", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("0123456789abcdef0123", "true")}, "0123456789ab-dirty"},
		{"go build without VCS", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev"},
		{"no build info", "", nil, "dev"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := versionOf(tc.stamped, func() (*debug.BuildInfo, bool) { return tc.info, tc.info != nil })
			if got != tc.want {
				t.Errorf("versionOf(%q) = %q, want %q", tc.stamped, got, tc.want)
			}
		})
	}
}
