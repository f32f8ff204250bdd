package experiment

import (
	"fmt"
	"os/user"
	"strconv"
)

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
