package loadtest

import (
	"context"
	"time"
)

// Progress is a snapshot of a session, for a person or a fault test.
type Progress struct {
	Phase    string        `json:"phase"` // setup, sending, draining, verifying, closing
	Elapsed  time.Duration `json:"elapsed"`
	Sent     int64         `json:"sent"`     // votes with a final answer
	Accepted int64         `json:"accepted"` // of which answered 202
	Requests int64         `json:"requests"` // HTTP requests, retries included
	// Rate is the votes answered 202 per second since the previous
	// snapshot the progress loop took (0 from Session.Progress).
	Rate float64 `json:"rate"`
	// Queue is the queue's status, when it could be read.
	Queue *QueueStatus `json:"queue,omitempty"`
}

// Progress returns the session's counters now. It is cheap and safe to
// call from any goroutine.
func (s *Session) Progress() Progress {
	ph, _ := s.phase.Load().(string)
	var el time.Duration
	if st := s.started.Load(); st != 0 {
		el = time.Since(time.Unix(0, st))
	}
	return Progress{Phase: ph, Elapsed: el, Sent: s.sent.Load(), Accepted: s.acceptedN.Load(), Requests: s.requests.Load()}
}

// startProgress calls Config.Progress every ProgressEvery until the
// returned function is called.
func (s *Session) startProgress(ctx context.Context) (stop func()) {
	if s.cfg.Progress == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(s.cfg.ProgressEvery)
		defer t.Stop()
		last, lastAt := s.acceptedN.Load(), time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			p := s.Progress()
			now := time.Now()
			p.Rate = float64(p.Accepted-last) / now.Sub(lastAt).Seconds()
			last, lastAt = p.Accepted, now
			if s.queue != nil {
				qctx, qcancel := context.WithTimeout(ctx, s.cfg.ProgressEvery)
				if st, err := s.queue.Status(qctx); err == nil {
					p.Queue = &st
				}
				qcancel()
			}
			if ctx.Err() == nil {
				s.cfg.Progress(p)
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
