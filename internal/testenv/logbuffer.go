package testenv

import (
	"bytes"
	"sync"
)

// LogBuffer collects log lines written from any goroutine (a server's
// handlers, go-redis' pool, a daemon) while a test reads them.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
