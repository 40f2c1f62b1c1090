package projector

import "sync"

// inFlight is what this projector holds: the entries it has handed on and
// not yet settled (acknowledged, dead-lettered, or left pending after a
// failure), by stream and id, so that its own claim passes over them. An
// entry held twice (a batch handed to the acknowledger still holds it
// after the batch is done) is settled at its last release.
type inFlight struct {
	mu  sync.Mutex
	ids map[string]map[string]int // stream -> id -> holds
}

// hold marks msgs in flight.
func (f *inFlight) hold(msgs []message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ids == nil {
		f.ids = map[string]map[string]int{}
	}
	for _, m := range msgs {
		byID := f.ids[m.stream]
		if byID == nil {
			byID = map[string]int{}
			f.ids[m.stream] = byID
		}
		byID[m.id]++
	}
}

// release takes back one hold of each of msgs.
func (f *inFlight) release(msgs []message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range msgs {
		byID := f.ids[m.stream]
		if byID[m.id] > 1 {
			byID[m.id]--
			continue
		}
		delete(byID, m.id)
	}
}

// of returns the ids held in stream s.
func (f *inFlight) of(s string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := make([]string, 0, len(f.ids[s]))
	for id := range f.ids[s] {
		ids = append(ids, id)
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
