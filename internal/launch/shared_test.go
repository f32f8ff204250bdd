package launch

import (
	"bytes"
	"os"
	"strings"
	"sync"
	"testing"
)

// Lines written from many goroutines at once arrive whole, and Bytes
// reads them while they are still being written.
func TestSharedWriterKeepsEachWriteWhole(t *testing.T) {
	const writers, lines = 8, 200
	s := Share(&bytes.Buffer{})
	line := strings.Repeat("x", 100) + "\n"
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range lines {
				if _, err := s.Write([]byte(line)); err != nil {
					t.Error(err)
				}
				_ = s.Bytes()
			}
		}()
	}
	wg.Wait()
	got := strings.SplitAfter(string(s.Bytes()), "\n")
	if len(got) != writers*lines+1 || got[len(got)-1] != "" {
		t.Fatalf("%d pieces, want %d lines", len(got), writers*lines)
	}
	for i, l := range got[:len(got)-1] {
		if l != line {
			t.Fatalf("line %d is %q", i, l)
		}
	}
}

func TestSharedWriterBytesOfAnotherWriterIsNil(t *testing.T) {
	f, err := os.Create(t.TempDir() + "/out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := Share(f)
	if _, err := s.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if b := s.Bytes(); b != nil {
		t.Fatalf("Bytes = %q, want nil for a file", b)
	}
}
