package intake

import (
	"net"
	"sync"
)

// This file owns the cap on connections (Config.MaxConns): the listener
// takes no connection beyond it, so a flood of clients waits in the
// kernel's accept queue instead of costing intake a goroutine and buffers
// each. It is golang.org/x/net/netutil.LimitListener's idea, which the
// module does not depend on.

// limitListener accepts at most cap(slots) connections open at once.
type limitListener struct {
	net.Listener
	slots     chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
}

func limitListen(ln net.Listener, n int) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, n), closed: make(chan struct{})}
}

// Accept waits for a free slot, then for a connection, which gives its
// slot back when it is closed. It returns net.ErrClosed once the listener
// is closed, even while it waited for a slot.
func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: l.release}, nil
}

func (l *limitListener) release() { <-l.slots }

// Close closes the listener and wakes an Accept that waits for a slot.
func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.closed) })
	return err
}

// limitConn is a connection that holds a slot of its listener until it is
// closed, once however often Close is called.
type limitConn struct {
	net.Conn
	releaseOnce sync.Once
	release     func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.releaseOnce.Do(c.release)
	return err
}
