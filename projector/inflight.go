package projector

import (
	"sync"
	"time"
)

// inFlight is what this projector holds: the entries it has handed on and
// not yet settled (acknowledged, dead-lettered, or left pending after a
// failure), by stream and id, so that its own claim passes over them. An
// entry held twice (a batch handed to the acknowledger still holds it
// after the batch is done) is settled at its last release.
type inFlight struct {
	mu  sync.Mutex
	ids map[string]map[string]hold // stream -> id -> its hold
}

// hold is how often an entry is held, and since when.
type hold struct {
	count int
	since time.Time
}

// hold marks msgs in flight.
func (f *inFlight) hold(msgs []message) {
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ids == nil {
		f.ids = map[string]map[string]hold{}
	}
	for _, m := range msgs {
		byID := f.ids[m.stream]
		if byID == nil {
			byID = map[string]hold{}
			f.ids[m.stream] = byID
		}
		h := byID[m.id]
		if h.count == 0 {
			h.since = now
		}
		h.count++
		byID[m.id] = h
	}
}

// release takes back one hold of each of msgs.
func (f *inFlight) release(msgs []message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range msgs {
		byID := f.ids[m.stream]
		h := byID[m.id]
		if h.count > 1 {
			h.count--
			byID[m.id] = h
			continue
		}
		delete(byID, m.id)
	}
}

// heldFor returns the ids of stream s held for at least d: an entry held
// for less was delivered here more recently than that, so a claim of
// entries idle for longer than d cannot find it.
func (f *inFlight) heldFor(s string, d time.Duration) []string {
	since := time.Now().Add(-d)
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for id, h := range f.ids[s] {
		if !h.since.After(since) {
			ids = append(ids, id)
		}
	}
	return ids
}

// reset forgets every hold: what a stopped Run left in its mailboxes is
// pending in Redis, for the next start's own pending entries or a claim.
func (f *inFlight) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.ids)
}
