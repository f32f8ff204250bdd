package proc

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
)

// User is an identity a command runs as (internal/launch starts it so).
type User struct {
	UID, GID uint32
	Groups   []uint32 // supplementary groups
	// Name and Home, when known, replace USER, LOGNAME and HOME in the
	// child's environment: under sudo they still name root, and a command
	// that writes to ~/.cache would then fail or write into /root.
	Name, Home string
}

// LookupUser resolves a user name or numeric id, with its groups, for
// --user.
func LookupUser(name string) (*User, error) {
	u, err := user.Lookup(name)
	if err != nil {
		if _, nerr := strconv.Atoi(name); nerr == nil {
			u, err = user.LookupId(name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("looking up user %q: %w", name, err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	out := &User{UID: uint32(uid), GID: uint32(gid), Name: u.Username, Home: u.HomeDir}
	gids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("looking up the groups of %q: %w", name, err)
	}
	for _, g := range gids {
		if v, err := strconv.ParseUint(g, 10, 32); err == nil && uint32(v) != out.GID {
			out.Groups = append(out.Groups, uint32(v))
		}
	}
	return out, nil
}

// SudoUser returns the invoking user under sudo (SUDO_UID/SUDO_GID) with
// their supplementary groups and home, nil when not under sudo.
func SudoUser() (*User, error) {
	su, sg := os.Getenv("SUDO_UID"), os.Getenv("SUDO_GID")
	if su == "" || os.Geteuid() != 0 {
		return nil, nil
	}
	uid, err := strconv.ParseUint(su, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("bad SUDO_UID %q: %w", su, err)
	}
	gid, err := strconv.ParseUint(sg, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("bad SUDO_GID %q: %w", sg, err)
	}
	if uid == 0 {
		return nil, nil // root ran sudo: nothing to drop
	}
	u, err := LookupUser(su)
	if err != nil {
		// A uid without a passwd entry (a container) still runs, with
		// no supplementary groups.
		return &User{UID: uint32(uid), GID: uint32(gid)}, nil
	}
	// sudo's SUDO_GID is the primary group the user logged in with;
	// it wins over the passwd entry.
	u.GID = uint32(gid)
	return u, nil
}
