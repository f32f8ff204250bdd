package proc

import (
	"testing"

	"github.com/iocorr/iocorr/testkit/testenv"
)

func TestSudoUserIsTheInvokingUser(t *testing.T) {
	testenv.RequireRoot(t)
	tests := []struct {
		name, uid, gid string
		want           *User
	}{
		{"not under sudo", "", "", nil},
		{"root ran sudo", "0", "0", nil},
		{"a user ran sudo", "65534", "65534", &User{UID: 65534, GID: 65534, Name: "nobody", Home: "/nonexistent"}},
		{"a uid without a passwd entry", "54321", "54321", &User{UID: 54321, GID: 54321}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SUDO_UID", tc.uid)
			t.Setenv("SUDO_GID", tc.gid)
			u, err := SudoUser()
			if err != nil {
				t.Fatal(err)
			}
			if (u == nil) != (tc.want == nil) || u != nil && (u.UID != tc.want.UID || u.GID != tc.want.GID || u.Name != tc.want.Name || u.Home != tc.want.Home) {
				t.Fatalf("SudoUser() = %+v, want %+v", u, tc.want)
			}
		})
	}
}
