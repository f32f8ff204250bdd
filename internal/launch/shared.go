package launch

import (
	"bytes"
	"io"
	"sync"
)

// SharedWriter serializes writes to one writer: the command's stdout and
// stderr are copied by two goroutines of exec.Cmd, and iocorr's own
// messages come from the ring's drain, all possibly into the same writer.
type SharedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// Share makes w safe for several writers at once.
func Share(w io.Writer) *SharedWriter { return &SharedWriter{w: w} }

func (s *SharedWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// Bytes is a copy of what was written so far when the writer shared is a
// *bytes.Buffer (nil otherwise): a caller reads a process's output while
// the process writes it.
func (s *SharedWriter) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.w.(*bytes.Buffer); ok {
		return bytes.Clone(b.Bytes())
	}
	return nil
}
