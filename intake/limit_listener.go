package intake

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tally/intake/internal/holds"
)

// This file owns the bounds on connections: at most Config.MaxConns open
// at once, so that a flood of clients waits in the kernel's accept queue
// instead of costing intake a goroutine and buffers each (the idea of
// golang.org/x/net/netutil.LimitListener, which the module does not depend
// on); and at most Config.MaxConnsPerAddr from one client address, so that
// one client cannot take them all (package holds).

// probTooManyConns: the client's address holds Config.MaxConnsPerAddr
// connections already.
var probTooManyConns = problemType{Slug: "too-many-connections", Title: "Too many connections from your address"}

// refusingAtOnce bounds the refused connections being answered at once;
// beyond it a refused connection is closed unanswered, so that a flood of
// them costs a goroutine each for no longer than refuseWithin.
const (
	refusingAtOnce = 64
	refuseWithin   = time.Second
)

// limitListener accepts at most cap(slots) connections open at once, and
// at most perAddr's bound from one client address.
type limitListener struct {
	net.Listener
	slots   chan struct{}
	perAddr *holds.Holds // nil: no bound per address
	// answer is written to a connection refused for its address before it
	// is closed: a plain HTTP 503 too-many-connections, or nil when the
	// listener serves TLS (answering would take a handshake, which a
	// flood would then choose to cost intake).
	answer    []byte
	answering chan struct{} // refusingAtOnce slots
	refused   prometheus.Counter
	closed    chan struct{}
	closeOnce sync.Once
}

// limitListen bounds ln to n connections at once and perAddr a client
// address (negative: no bound per address); refused counts the
// connections refused for their address. tls says ln's connections
// carry TLS, which a refusal does not answer.
func limitListen(ln net.Listener, n, perAddr int, tls bool, refused prometheus.Counter) *limitListener {
	l := &limitListener{
		Listener: ln, slots: make(chan struct{}, n), perAddr: holds.New(perAddr),
		answering: make(chan struct{}, refusingAtOnce), refused: refused, closed: make(chan struct{}),
	}
	if !tls {
		l.answer = tooManyConnsAnswer(perAddr)
	}
	return l
}

// tooManyConnsAnswer is the HTTP/1.1 answer of a connection refused for
// its address, made by writeProblem as every other problem is.
func tooManyConnsAnswer(perAddr int) []byte {
	rec := &recorder{header: http.Header{}}
	writeProblem(rec, http.StatusServiceUnavailable, probTooManyConns, fmt.Sprintf(
		"your address holds %d connections to this intake, its most per address: "+
			"reuse the connections you hold (keep-alive), close idle ones, and retry after the Retry-After delay", perAddr), time.Second)
	res := &http.Response{
		StatusCode: rec.code, ProtoMajor: 1, ProtoMinor: 1, Header: rec.header, Close: true,
		ContentLength: int64(rec.body.Len()), Body: io.NopCloser(&rec.body),
	}
	var b bytes.Buffer
	res.Write(&b)
	return b.Bytes()
}

// recorder is a ResponseWriter that keeps what is written.
type recorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) WriteHeader(code int)        { r.code = code }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }

// Accept waits for a free slot, then for a connection from an address
// that holds fewer than its bound, which gives both back when it is
// closed. A connection beyond its address's bound is answered 503 and
// closed, and Accept waits for the next. It returns net.ErrClosed once
// the listener is closed, even while it waited for a slot.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
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
		var key uint64
		if l.perAddr != nil {
			key = l.perAddr.AddrKey(c.RemoteAddr().String())
			if !l.perAddr.Acquire(key) {
				<-l.slots
				l.refuse(c)
				continue
			}
		}
		return &limitConn{Conn: c, l: l, key: key}, nil
	}
}

// refuse answers a connection refused for its address, within
// refuseWithin, and closes it; unanswered when refusingAtOnce are being
// answered already or the listener serves TLS.
func (l *limitListener) refuse(c net.Conn) {
	l.refused.Inc()
	if l.answer == nil {
		c.Close()
		return
	}
	select {
	case l.answering <- struct{}{}:
	default:
		c.Close()
		return
	}
	go func() {
		defer func() { <-l.answering }()
		c.SetDeadline(time.Now().Add(refuseWithin))
		c.Write(l.answer)
		// Close after the client's request has had a moment to arrive,
		// reading what it sent, so the close is a FIN and not a reset
		// that could discard the answer before the client reads it.
		if tc, ok := c.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		var buf [512]byte
		for {
			if _, err := c.Read(buf[:]); err != nil {
				break
			}
		}
		c.Close()
	}()
}

// release gives back a closed connection's slot and its address's hold.
func (l *limitListener) release(key uint64) {
	l.perAddr.Release(key)
	<-l.slots
}

// Close closes the listener and wakes an Accept that waits for a slot.
func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.closed) })
	return err
}

// limitConn is a connection that holds a slot of its listener and a hold
// of its address until it is closed, once however often Close is called.
type limitConn struct {
	net.Conn
	l           *limitListener
	key         uint64
	releaseOnce sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.releaseOnce.Do(func() { c.l.release(c.key) })
	return err
}
