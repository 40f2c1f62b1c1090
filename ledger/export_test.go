package ledger

import (
	"bytes"
	"sync"
)

// FullPathOnly turns off Append's optimistic step on s, so tests can hold
// both ways through appendTx to the same rules.
func FullPathOnly(s *Store) { s.fullPathOnly = true }

// lockedBuffer collects log lines from any goroutine.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// LockedBuffer lets the external tests collect log lines too.
type LockedBuffer = lockedBuffer
