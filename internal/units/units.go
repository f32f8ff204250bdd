// Package units reads and writes the sizes and durations people type and
// read: "96MiB" on a command line, "1.5 MiB" in a table. It is the one size
// parser and the one set of formatters of the tree, a command line's
// included (ShellJoin).
package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseSize reads "123", "500MB", "2GiB", "1.5G" (K/M/G/T alone are binary,
// as in dd and truncate).
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') && t[i-1] != '.' {
		i--
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v <= 0 || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is not a size (want e.g. 500MiB or 2GiB)", s)
	}
	mult := map[string]float64{
		"": 1, "b": 1,
		"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
		"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
		"g": 1 << 30, "gib": 1 << 30, "gb": 1e9,
		"t": 1 << 40, "tib": 1 << 40, "tb": 1e12,
	}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("%q: unknown unit %q (want B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", s, t[i:])
	}
	if v*mult > 1<<50 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return int64(v * mult), nil
}

// ExactSize writes n in the largest binary unit that divides it ("96MiB"),
// so that ParseSize reads back n: the form of a limit or a flag value.
func ExactSize(n int64) string {
	for _, u := range []struct {
		s     string
		shift uint
	}{{"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if n>>u.shift > 0 && n&(1<<u.shift-1) == 0 {
			return fmt.Sprintf("%d%s", n>>u.shift, u.s)
		}
	}
	return fmt.Sprintf("%dB", n)
}

// Bytes writes a byte count for a reader: whole bytes below 1 KiB, else one
// decimal in the largest binary unit below 1024 of it ("1.5 MiB").
func Bytes(v float64) string {
	const unit = 1024
	if v < unit {
		return fmt.Sprintf("%.0f B", v)
	}
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		v /= unit
		if v < unit {
			return fmt.Sprintf("%.1f %s", v, u)
		}
	}
	return fmt.Sprintf("%.1f PiB", v/unit)
}

// Duration writes nanoseconds for a reader: whole ns below 1 µs, else one
// decimal in µs or ms, two in s.
func Duration(ns float64) string {
	switch {
	case ns < 10 && ns != math.Trunc(ns):
		// A time per byte (doctor's prefetch cost: 0.6 ns) is lost to
		// rounding in whole ns.
		return fmt.Sprintf("%.2f ns", ns)
	case ns < 1e3:
		return fmt.Sprintf("%.0f ns", ns)
	case ns < 1e6:
		return fmt.Sprintf("%.1f µs", ns/1e3)
	case ns < 1e9:
		return fmt.Sprintf("%.1f ms", ns/1e6)
	}
	return fmt.Sprintf("%.2f s", ns/1e9)
}

// Size is a size flag's value (a pflag.Value): the bytes ParseSize reads
// of what was typed, so that a command is handed bytes and a mistyped
// size is refused where the flag is read, in one way for every command.
type Size int64

// Set reads one size.
func (s *Size) Set(v string) error {
	n, err := ParseSize(v)
	if err != nil {
		return err
	}
	*s = Size(n)
	return nil
}

// String is the size as a flag takes it; "" when unset.
func (s *Size) String() string {
	if *s == 0 {
		return ""
	}
	return ExactSize(int64(*s))
}

// Type names the value in a flag's help.
func (s *Size) Type() string { return "size" }

// Sizes is a flag of comma-separated sizes (a pflag.Value; given again,
// it adds to the list), each kept as typed beside its bytes: a sweep
// names each run's directory by the budget as typed.
type Sizes struct {
	Typed []string
	Bytes []int64
}

// Set reads a comma-separated list of sizes.
func (s *Sizes) Set(v string) error {
	for _, t := range strings.Split(v, ",") {
		n, err := ParseSize(t)
		if err != nil {
			return err
		}
		s.Typed, s.Bytes = append(s.Typed, t), append(s.Bytes, n)
	}
	return nil
}

// String is the list as a flag takes it.
func (s *Sizes) String() string { return strings.Join(s.Typed, ",") }

// Type names the value in a flag's help.
func (s *Sizes) Type() string { return "sizes" }

// ShellJoin is a command line as a shell reads it back: each argument
// that is empty or holds a character the shell would take apart
// single-quoted.
func ShellJoin(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = a
		if a == "" || strings.ContainsAny(a, " \t\n'\"$\\`*?;&|<>()") {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}
