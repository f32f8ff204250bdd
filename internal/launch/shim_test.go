package launch

import (
	"strings"
	"testing"
)

// TestAProcessStartedAsAShimStartsNoShimOrWarden: a binary whose main
// does not call RunShimIfChild runs its program in the launcher and the
// warden iocorr starts; a recorder in there must not start its own, or
// each level starts the next.
func TestAProcessStartedAsAShimStartsNoShimOrWarden(t *testing.T) {
	starts := []struct {
		name  string
		start func() error
	}{
		{"warden", func() error {
			w, err := StartWarden(func(string) {})
			if err == nil {
				w.Close()
			}
			return err
		}},
		{"held child", func() error {
			c, err := StartHeld([]string{"true"}, nil, nil, nil, nil)
			if err == nil {
				c.Abort()
			}
			return err
		}},
	}
	for _, env := range []string{wardenEnv, shimEnv} {
		for _, s := range starts {
			t.Run(env+" set, "+s.name, func(t *testing.T) {
				t.Setenv(env, "1")
				if err := s.start(); err == nil || !strings.Contains(err.Error(), "RunShimIfChild") {
					t.Errorf("err = %v, want a refusal naming RunShimIfChild", err)
				}
			})
		}
	}
}
