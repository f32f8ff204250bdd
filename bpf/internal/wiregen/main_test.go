package main

import (
	"bytes"
	"os"
	"testing"
)

// The wire package's types are what the committed objects' BTF says of
// iocorr.h's structs and enums, on both targets: a header changed without
// `make generate` fails here, as the objects do in bpf's
// TestGenerateReproducesCommittedObjects.
func TestTheWireTypesAreWhatTheObjectsBTFSays(t *testing.T) {
	committed, err := os.ReadFile("../../../wire/types_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range []string{"iocorr_x86_bpfel.o", "iocorr_arm64_bpfel.o"} {
		t.Run(obj, func(t *testing.T) {
			got, err := generate("../../"+obj, "../../iocorr.h")
			if err != nil {
				t.Fatal(err)
			}
			// The first line names the object the file was written from.
			got = bytes.Replace(got, []byte(obj), []byte("iocorr_x86_bpfel.o"), 1)
			if !bytes.Equal(got, committed) {
				t.Errorf("wire/types_gen.go differs from what %s's BTF gives (%d bytes committed, %d generated): run make generate and commit it",
					obj, len(committed), len(got))
			}
		})
	}
}

func TestAHeaderTypeMissingFromTheObjectIsRefused(t *testing.T) {
	h := t.TempDir() + "/iocorr.h"
	if err := os.WriteFile(h, []byte("struct event_hdr {\n};\nstruct no_such_event {\n};\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := generate("../../iocorr_x86_bpfel.o", h); err == nil {
		t.Fatal("a struct the object lacks was not refused")
	}
}

// The wire types keep the names bpf2go gave them, less its stem.
func TestIdentifierIsBpf2gosNameForACName(t *testing.T) {
	for _, tc := range []struct{ c, want string }{
		{"event_hdr", "EventHdr"},
		{"nr_pages", "NrPages"},
		{"pad0", "Pad0"},
		{"EV_PAGE_RUN", "EV_PAGE_RUN"},
		{"BLOCK_COMPLETION_UNSEEN", "BLOCK_COMPLETION_UNSEEN"},
		{"seq_tokens", "SeqTokens"},
		{"_leading", "Leading"},
		{"x2_y", "X2Y"},
	} {
		if got := identifier(tc.c); got != tc.want {
			t.Errorf("identifier(%q) = %q, want %q", tc.c, got, tc.want)
		}
	}
}
