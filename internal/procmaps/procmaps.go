// Package procmaps parses /proc/PID/maps, the kernel's list of a
// process's memory mappings.
package procmaps

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// deletedSuffix is what the kernel's d_path appends to the name of a file
// that was unlinked while mapped.
const deletedSuffix = " (deleted)"

// Mapping is one line of /proc/PID/maps.
type Mapping struct {
	Start, End uint64 // [Start, End) virtual addresses
	Perms      string // "r-xp": read, write, execute, private or shared
	Offset     uint64 // file offset of Start
	// Major and Minor are the device of the mapped file as the kernel
	// prints it (hexadecimal in the file; 0:0 for anonymous memory).
	Major, Minor uint32
	Inode        uint64
	// Path is the file, a pseudo name such as "[heap]", or "" for
	// anonymous memory. It is as the kernel prints it: a newline in a
	// name shows as \012, and leading spaces of a name cannot be told
	// from the padding before it.
	Path string
	// Deleted says the file was unlinked; Path is then without the
	// kernel's " (deleted)".
	Deleted bool
}

// Shared reports whether the mapping is MAP_SHARED.
func (m Mapping) Shared() bool { return len(m.Perms) == 4 && m.Perms[3] == 's' }

// ParseLine parses "start-end perms offset major:minor inode [path]".
// The path is everything after the inode and the padding that follows
// it, so names with spaces survive.
func ParseLine(line string) (Mapping, error) {
	var m Mapping
	bad := func(why string) (Mapping, error) {
		return Mapping{}, fmt.Errorf("%q is not a maps line: %s", line, why)
	}
	rest := line
	field := func() string {
		f, r, _ := strings.Cut(rest, " ")
		rest = r
		return f
	}
	addrs, perms, off, dev, ino := field(), field(), field(), field(), field()
	lo, hi, ok := strings.Cut(addrs, "-")
	if !ok {
		return bad("no start-end range")
	}
	var err error
	if m.Start, err = strconv.ParseUint(lo, 16, 64); err != nil {
		return bad("start address")
	}
	if m.End, err = strconv.ParseUint(hi, 16, 64); err != nil {
		return bad("end address")
	}
	if m.End < m.Start {
		return bad("end before start")
	}
	if len(perms) != 4 {
		return bad("permissions")
	}
	m.Perms = perms
	if m.Offset, err = strconv.ParseUint(off, 16, 64); err != nil {
		return bad("offset")
	}
	maj, mnr, ok := strings.Cut(dev, ":")
	if !ok {
		return bad("no major:minor device")
	}
	// The kernel's device numbers are 12 bits of major and 20 of minor.
	v, err := strconv.ParseUint(maj, 16, 12)
	if err != nil {
		return bad("device major")
	}
	m.Major = uint32(v)
	if v, err = strconv.ParseUint(mnr, 16, 20); err != nil {
		return bad("device minor")
	}
	m.Minor = uint32(v)
	if m.Inode, err = strconv.ParseUint(ino, 10, 64); err != nil {
		return bad("inode")
	}
	m.Path = strings.TrimLeft(rest, " ")
	if p, ok := strings.CutSuffix(m.Path, deletedSuffix); ok && m.Inode != 0 {
		m.Path, m.Deleted = p, true
	}
	return m, nil
}

// Parse reads a whole maps file; a line that does not parse is an error
// naming its number.
func Parse(r io.Reader) ([]Mapping, error) {
	var out []Mapping
	sc := bufio.NewScanner(r)
	// A path can be up to PATH_MAX (4096) bytes after ~73 bytes of fields.
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		m, err := ParseLine(sc.Text())
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// Containing is the index of the mapping of ms that holds addr, -1 when
// none does (mappings do not overlap).
func Containing(ms []Mapping, addr uint64) int {
	return slices.IndexFunc(ms, func(m Mapping) bool { return m.Start <= addr && addr < m.End })
}

// Read parses /proc/PID/maps.
func Read(pid int) ([]Mapping, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ms, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("maps of %d: %w", pid, err)
	}
	return ms, nil
}
