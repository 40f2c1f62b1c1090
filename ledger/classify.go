package ledger

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// owner is what holds a (principal, client key): a ledger row or a
// rejection record, in the database or made earlier in the batch, with the
// payload it was made with and the outcome an exact replay gets.
type owner struct {
	fp     [32]byte
	replay Outcome
}

// rejection is a rejection to record.
type rejection struct {
	e      Event
	fp     [32]byte
	reason Reason
}

// decision is what the full rules make of one event.
type decision struct {
	outcome Outcome // for a new ledger row, Seq is set once it is inserted
	owner   owner   // what holds the event's key afterwards
	insert  bool    // a new ledger row: it claims the event's (poll, principal)
	record  bool    // a rejection to record, for outcome.Reason
}

// decide applies the full rules to one event: f are the facts the database
// holds for it (loaded only for the first event of its key in the batch;
// later events of a key always find it owned), fp its payload's
// fingerprint, prior what holds its key so far in the batch (when owned),
// and answered whether an earlier event of the batch took its (poll,
// principal). It reads nothing else, so the rules can be tested without a
// database.
func decide(f *facts, fp [32]byte, prior owner, owned, answered bool) decision {
	if !owned {
		// The database's record of the key, if any, owns it.
		switch {
		case f.keySeq != nil:
			prior, owned = owner{fp: f.keyFP, replay: Outcome{Status: StatusDuplicate, Seq: *f.keySeq}}, true
		case f.rejReason != nil:
			prior, owned = owner{fp: f.rejFP, replay: Outcome{Status: StatusRejected, Reason: Reason(*f.rejReason)}}, true
		}
	}
	if owned {
		if prior.fp == fp {
			return decision{outcome: prior.replay, owner: prior}
		}
		return decision{outcome: Outcome{Status: StatusRejected, Reason: ReasonKeyReused}, owner: prior, record: true}
	}
	var reason Reason
	switch {
	case !f.pollExists:
		reason = ReasonUnknownPoll
	case !f.pollOpen:
		reason = ReasonPollClosed
	case !f.choiceValid && f.ballot:
		reason = ReasonInvalidBallot
	case !f.choiceValid:
		reason = ReasonInvalidChoice
	case !f.eligible:
		reason = ReasonNotEligible
	case !f.latest && (f.answeredSeq != nil || answered):
		reason = ReasonAlreadyResponded
	}
	if reason != "" {
		out := Outcome{Status: StatusRejected, Reason: reason}
		return decision{outcome: out, owner: owner{fp: fp, replay: out}, record: true}
	}
	return decision{
		outcome: Outcome{Status: StatusRecorded},
		owner:   owner{fp: fp, replay: Outcome{Status: StatusDuplicate}}, // Seq set once inserted
		insert:  true,
	}
}

// classify applies the full rules to events[idx], in batch order, fills in
// their outcomes and writes what they decide: the new ledger rows (with
// their projection deltas) and the rejections. When a concurrent
// transaction pre-empted one of its inserts (a unique violation), the
// classification of the whole batch is void: classify returns errRaced and
// runTx starts over.
func classify(ctx context.Context, tx pgx.Tx, in appendInput, idx []int, outcomes []Outcome) error {
	events, fps := in.events, in.fps
	fs, err := loadFacts(ctx, tx, in, firstOfKeys(events, idx))
	if err != nil {
		return err
	}
	inserts, rejections, owners := decideAll(events, fps, idx, fs, outcomes)
	seqs, err := insertEvents(ctx, tx, insertEventsSQL, in, inserts)
	if err != nil {
		return err
	}
	if len(seqs) != len(inserts) {
		return errRaced
	}
	fillSeqs(events, idx, inserts, seqs, owners, outcomes)
	return insertRejections(ctx, tx, rejections)
}

// firstOfKeys returns the first event of each (principal, key) among
// events[idx]: the ones whose facts are loaded.
func firstOfKeys(events []Event, idx []int) []int {
	var firsts []int
	seen := make(map[keyOf]bool, len(idx))
	for _, i := range idx {
		k := keyOf{events[i].PrincipalID, events[i].ClientEventID}
		if !seen[k] {
			seen[k] = true
			firsts = append(firsts, i)
		}
	}
	return firsts
}

// decideAll decides events[idx] in batch order, each against what the
// events before it claimed, and returns the events to insert, the
// rejections to record and the owner of every key.
func decideAll(events []Event, fps [][32]byte, idx []int, fs []facts, outcomes []Outcome) ([]int, []rejection, map[keyOf]owner) {
	owners := make(map[keyOf]owner, len(idx))
	answered := make(map[pollPrincipal]bool, len(idx))
	var inserts []int
	var rejections []rejection
	for _, i := range idx {
		e := events[i]
		k, pp := keyOf{e.PrincipalID, e.ClientEventID}, pollPrincipal{e.PollID, e.PrincipalID}
		prior, owned := owners[k]
		d := decide(&fs[i], fps[i], prior, owned, answered[pp])
		outcomes[i], owners[k] = d.outcome, d.owner
		if d.insert {
			answered[pp] = true
			inserts = append(inserts, i)
		}
		if d.record {
			rejections = append(rejections, rejection{e, fps[i], d.outcome.Reason})
		}
	}
	return inserts, rejections, owners
}

// fillSeqs gives each event inserted, and each exact repeat of it later in
// the batch, the seq of its new ledger row.
func fillSeqs(events []Event, idx, inserts []int, seqs map[int]int64, owners map[keyOf]owner, outcomes []Outcome) {
	for _, i := range inserts {
		outcomes[i].Seq = seqs[i]
		k := keyOf{events[i].PrincipalID, events[i].ClientEventID}
		o := owners[k]
		o.replay.Seq = seqs[i]
		owners[k] = o
	}
	for _, i := range idx {
		if outcomes[i].Status == StatusDuplicate && outcomes[i].Seq == 0 {
			outcomes[i].Seq = owners[keyOf{events[i].PrincipalID, events[i].ClientEventID}].replay.Seq
		}
	}
}
