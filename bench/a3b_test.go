package bench

import "testing"

func TestOnDemandSectionsRunOnlyWhenNamed(t *testing.T) {
	for _, c := range []struct {
		sections []string
		section  string
		want     bool
	}{
		{nil, "overhead", true},
		{nil, "a3b", false},
		{[]string{"a3b"}, "a3b", true},
		{[]string{"a3b"}, "overhead", false},
		{[]string{"scale", "a3b"}, "scale", true},
	} {
		if got := (Config{Sections: c.sections}).runs(c.section); got != c.want {
			t.Errorf("sections %v: runs(%q) = %v, want %v", c.sections, c.section, got, c.want)
		}
	}
}
