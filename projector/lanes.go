package projector

import (
	"context"
	"sync"
	"time"

	"tally/vote"
)

// batchLoop splits what the readers hand over among Config.Workers lanes,
// by principal, and each lane gathers its own batches and applies them one
// at a time (lane). All the entries of one principal go through one lane,
// in stream order, so a principal's first answer reaches the ledger before
// the second even while other lanes' batches are applied at once: every
// rule that depends on order is about one principal. Each lane has a
// mailbox the split drops entries into without waiting, so a lane that is
// slow (a batch waiting on a lock, a poison entry) does not starve the
// others; only when a lane's mailbox holds a full batch does the split wait
// for it, and with it the readers: memory stays bounded. When ctx is done
// each lane applies what it holds, on applyCtx, and batchLoop returns once
// every lane has finished.
func (p *Projector) batchLoop(ctx, applyCtx context.Context, in <-chan []message) {
	mailboxes := make([]*mailbox, p.cfg.Workers)
	var wg sync.WaitGroup
	for w := range mailboxes {
		mailboxes[w] = newMailbox()
		wg.Go(func() { p.lane(ctx, applyCtx, mailboxes[w]) })
	}
	defer wg.Wait()
	lanes := vote.NewLanes(len(mailboxes))
	parts := make([][]message, len(mailboxes))
	for {
		select {
		case <-ctx.Done():
			return
		case msgs := <-in:
			for _, m := range msgs {
				// An entry that did not decode is dead-lettered in any lane.
				w := lanes.Of(m.event.PrincipalID)
				parts[w] = append(parts[w], m)
			}
			for w, part := range parts {
				if len(part) > 0 && !mailboxes[w].put(ctx, part, p.cfg.BatchSize) {
					return // what is not handed over stays pending
				}
				parts[w] = nil
			}
		}
	}
}

// mailbox is what the split has handed to one lane and the lane has not
// taken yet.
type mailbox struct {
	mu    sync.Mutex
	msgs  []message
	ready chan struct{} // a token while msgs is not empty
	space chan struct{} // a token when the lane has taken msgs
}

func newMailbox() *mailbox {
	return &mailbox{ready: make(chan struct{}, 1), space: make(chan struct{}, 1)}
}

// put adds msgs, first waiting while the mailbox holds at least limit
// entries. It reports false when ctx ended first.
func (mb *mailbox) put(ctx context.Context, msgs []message, limit int) bool {
	for {
		mb.mu.Lock()
		if len(mb.msgs) < limit {
			mb.msgs = append(mb.msgs, msgs...)
			mb.mu.Unlock()
			signal(mb.ready)
			return true
		}
		mb.mu.Unlock()
		select {
		case <-mb.space:
		case <-ctx.Done():
			return false
		}
	}
}

// take returns what the mailbox holds and empties it.
func (mb *mailbox) take() []message {
	mb.mu.Lock()
	msgs := mb.msgs
	mb.msgs = nil
	mb.mu.Unlock()
	signal(mb.space)
	return msgs
}

// signal leaves a token in c unless one is there already.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// lane gathers the entries of its mailbox into batches and applies each
// one when it holds Config.BatchSize entries or Config.BatchWait has passed
// since its first entry arrived, until ctx is done; then it applies what it
// holds once more, on applyCtx.
func (p *Projector) lane(ctx, applyCtx context.Context, mb *mailbox) {
	var buf []message
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	armed := false
	size := p.cfg.BatchSize
	for {
		select {
		case <-ctx.Done():
			buf = append(buf, mb.take()...)
			for len(buf) > 0 {
				n := min(len(buf), size)
				p.applyBatch(ctx, applyCtx, buf[:n])
				buf = buf[n:]
			}
			return
		case <-mb.ready:
			buf = append(buf, mb.take()...)
			for len(buf) >= size {
				p.applyBatch(ctx, applyCtx, buf[:size:size])
				buf = buf[size:] // the next append moves the tail if it must
				timer.Stop()
				armed = false
			}
			if len(buf) > 0 && !armed {
				timer.Reset(p.cfg.BatchWait)
				armed = true
			}
		case <-timer.C:
			armed = false
			if len(buf) > 0 {
				p.applyBatch(ctx, applyCtx, buf)
				buf = nil
			}
		}
	}
}
