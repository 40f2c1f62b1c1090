package loadtest

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"
)

// kind is what a vote is.
type kind uint8

const (
	kindFirst  kind = iota // a principal's first response in a poll, with a new key
	kindSecond             // another response of a principal accepted in the poll, with a new key
	kindRetry              // an accepted key sent again, same payload
	kindReuse              // an accepted key sent with another candidate
	numKinds
)

var kindNames = [numKinds]string{"first_response", "second_response", "exact_retry", "key_reuse"}

func (k kind) String() string { return kindNames[k] }

// keyStatus is what intake's answers say of a key.
type keyStatus uint8

const (
	keySending   keyStatus = iota // no final answer yet
	keyAccepted                   // answered 202: it must reach the ledger
	keyRefused                    // refused for sure: it was never enqueued
	keyUncertain                  // no definite answer: it may or may not be enqueued
)

// key is the ground truth of one client event id: who sent it, in which
// poll, with which payload, and what intake answered.
type key struct {
	principal  int32
	round      int32  // the poll: round r is poll prefix-r
	first      uint32 // the first response of the same principal and poll (itself for a first)
	candidate  uint8  // the payload it was first sent with
	altCand    int16  // a candidate a key reuse of it was accepted with (intake forgot the key); -1: none
	kind       kind   // kindFirst or kindSecond
	status     keyStatus
	ambiguous  bool  // a request for it got no definite answer
	accepts    int32 // 202 answers
	plannedAt  int64 // unix nanoseconds of its planning, before its first request
	acceptedAt int64 // unix nanoseconds of the first 202
}

// keyID is the client event id of key i.
func keyID(i uint32) string { return "k" + strconv.FormatUint(uint64(i), 10) }

// parseKeyID is the inverse of keyID.
func parseKeyID(s string) (uint32, bool) {
	rest, ok := strings.CutPrefix(s, "k")
	if !ok || rest == "" || (len(rest) > 1 && rest[0] == '0') {
		return 0, false
	}
	n, err := strconv.ParseUint(rest, 10, 32)
	return uint32(n), err == nil
}

func candidateID(c int) string { return "c" + strconv.Itoa(c+1) }

// task is one vote to send.
type task struct {
	kind      kind
	key       uint32
	principal int32
	round     int32
	candidate uint8
}

// truth is the ground truth of a session: every key sent and what intake
// answered. It also plans the next vote, since what may be sent depends on
// what was answered. Its methods are safe for concurrent use.
type truth struct {
	mu         sync.Mutex
	rng        *rand.Rand
	principals int
	choices    int
	retry      float64 // cumulative thresholds of the shares
	reuse      float64
	second     float64

	keys      []key
	accepted  []uint32 // keys answered 202, for retries and key reuse
	firstsOK  []uint32 // first responses answered 202, for second responses
	nextFirst int      // first-response slots handed out: slot s is principal s%principals in round s/principals

	// What the answers said, by vote.
	attempted   [numKinds]int64
	acceptedBy  [numKinds]int64
	refused     map[string]int64 // final answer of a vote not answered 202
	retried     map[string]int64 // answers after which a vote was sent again
	gaveUp      int64            // votes that never got a definite answer
	dupAccepts  int64            // 202 answers beyond a key's first
	acceptLatUS []uint32         // round trip of every 202, µs
	anomalies   anomalies
}

func newTruth(cfg Config, seed uint64) *truth {
	return &truth{
		rng:        rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		principals: cfg.Principals,
		choices:    cfg.PollChoices,
		retry:      cfg.RetryShare,
		reuse:      cfg.RetryShare + cfg.KeyReuseShare,
		second:     cfg.RetryShare + cfg.KeyReuseShare + cfg.SecondResponseShare,
		refused:    map[string]int64{},
		retried:    map[string]int64{},
	}
}

// otherCandidate picks a candidate other than c.
func (t *truth) otherCandidate(c uint8) uint8 {
	o := uint8(t.rng.IntN(t.choices - 1))
	if o >= c {
		o++
	}
	return o
}

// next plans the next vote. A retry, key reuse or second response needs a
// key already answered 202; while there is none, the vote is a first
// response. maxRounds bounds the polls a first response may need.
func (t *truth) next(maxRounds int) (task, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	u := t.rng.Float64()
	var tk task
	switch {
	case u < t.retry && len(t.accepted) > 0:
		i := t.accepted[t.rng.IntN(len(t.accepted))]
		k := &t.keys[i]
		tk = task{kind: kindRetry, key: i, principal: k.principal, round: k.round, candidate: k.candidate}
	case u < t.reuse && len(t.accepted) > 0:
		i := t.accepted[t.rng.IntN(len(t.accepted))]
		k := &t.keys[i]
		tk = task{kind: kindReuse, key: i, principal: k.principal, round: k.round, candidate: t.otherCandidate(k.candidate)}
	case u < t.second && len(t.firstsOK) > 0:
		f := t.firstsOK[t.rng.IntN(len(t.firstsOK))]
		fk := t.keys[f]
		i := uint32(len(t.keys))
		c := t.otherCandidate(fk.candidate)
		t.keys = append(t.keys, key{principal: fk.principal, round: fk.round, first: f, candidate: c, altCand: -1, kind: kindSecond, plannedAt: time.Now().UnixNano()})
		tk = task{kind: kindSecond, key: i, principal: fk.principal, round: fk.round, candidate: c}
	default:
		round := t.nextFirst / t.principals
		if round >= maxRounds {
			return task{}, false
		}
		p := int32(t.nextFirst % t.principals)
		t.nextFirst++
		i := uint32(len(t.keys))
		c := uint8(t.rng.IntN(t.choices))
		t.keys = append(t.keys, key{principal: p, round: int32(round), first: i, candidate: c, altCand: -1, kind: kindFirst, plannedAt: time.Now().UnixNano()})
		tk = task{kind: kindFirst, key: i, principal: p, round: int32(round), candidate: c}
	}
	t.attempted[tk.kind]++
	return tk, true
}

// answer is intake's answer to one request.
type answer struct {
	status     int           // 0: no answer
	slug       string        // the problem type, for an error
	eventID    string        // of a 202
	retryAfter time.Duration // of a 429 or 503
	err        error         // why there was no answer
	latency    time.Duration
}

// label names an answer for the report: "202", "409 key-reused", "no answer".
func (a answer) label() string {
	if a.status == 0 {
		return "no answer"
	}
	if a.slug == "" {
		return strconv.Itoa(a.status)
	}
	return strconv.Itoa(a.status) + " " + a.slug
}

// definite reports whether the answer says for sure whether the vote was
// enqueued: a 2xx or 4xx, or a 503 for a full backlog (refused before
// anything is written).
func (a answer) definite() bool {
	switch {
	case a.status == 0:
		return false
	case a.status < 500:
		return true
	default:
		return a.slug == "backlog-full"
	}
}

// noteRetry records an answer after which the vote is sent again.
func (t *truth) noteRetry(a answer) {
	t.mu.Lock()
	t.retried[a.label()]++
	t.mu.Unlock()
}

// record records the final answer to a vote. ambiguous says whether an
// earlier request for it got no definite answer.
func (t *truth) record(tk task, a answer, ambiguous bool, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := &t.keys[tk.key]
	ok := a.status == 202
	if ok {
		t.acceptedBy[tk.kind]++
		t.acceptLatUS = append(t.acceptLatUS, uint32(min(a.latency.Microseconds(), 1<<32-1)))
		if a.eventID != keyID(tk.key) {
			t.anomalies.add("202 answered with another event id", "sent %s, answered %q", keyID(tk.key), a.eventID)
		}
	} else {
		t.refused[a.label()]++
		if !a.definite() {
			t.gaveUp++
		}
	}
	switch tk.kind {
	case kindFirst, kindSecond:
		k.ambiguous = k.ambiguous || ambiguous || !a.definite()
		switch {
		case ok:
			k.status = keyAccepted
			k.accepts++
			k.acceptedAt = at.UnixNano()
			t.accepted = append(t.accepted, tk.key)
			if tk.kind == kindFirst {
				t.firstsOK = append(t.firstsOK, tk.key)
			}
		case k.ambiguous:
			k.status = keyUncertain
		default:
			k.status = keyRefused
		}
		if !ok && a.definite() && a.status != 429 && a.slug != "backlog-full" {
			if tk.kind == kindFirst {
				t.anomalies.add("first response refused", "%s of principal %d answered %s", keyID(tk.key), tk.principal, a.label())
			} else if a.status != 409 {
				t.anomalies.add("second response answered other than 202 or 409", "%s answered %s", keyID(tk.key), a.label())
			}
		}
	case kindRetry:
		if ok {
			k.accepts++
			t.dupAccepts++
		} else if a.definite() && a.status != 429 && a.slug != "backlog-full" {
			t.anomalies.add("exact retry of an accepted key not answered 202", "%s answered %s", keyID(tk.key), a.label())
		}
	case kindReuse:
		if ok {
			k.altCand = int16(tk.candidate)
			t.anomalies.add("key reuse answered 202 instead of 409 (I6; expected only if intake's idempotency window is shorter than the test)",
				"%s sent with %s after %s", keyID(tk.key), candidateID(int(tk.candidate)), candidateID(int(k.candidate)))
		} else if a.definite() && a.status != 409 && a.status != 429 && a.slug != "backlog-full" {
			t.anomalies.add("key reuse answered other than 409", "%s answered %s", keyID(tk.key), a.label())
		}
	}
}

// anomalies counts broken rules by kind, with one example each.
type anomalies struct {
	order []string
	by    map[string]*anomaly
}

type anomaly struct {
	count   int64
	example string
}

func (as *anomalies) add(what, exampleFormat string, args ...any) {
	if as.by == nil {
		as.by = map[string]*anomaly{}
	}
	a := as.by[what]
	if a == nil {
		a = &anomaly{example: fmt.Sprintf(exampleFormat, args...)}
		as.by[what] = a
		as.order = append(as.order, what)
	}
	a.count++
}

func (as *anomalies) messages() []string {
	out := make([]string, 0, len(as.order))
	for _, what := range as.order {
		a := as.by[what]
		out = append(out, fmt.Sprintf("%s: %d (e.g. %s)", what, a.count, a.example))
	}
	return out
}
