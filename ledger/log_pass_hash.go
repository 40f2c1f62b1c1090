package ledger

import (
	"strings"
	"time"
	"unsafe"

	"tally/audit"
)

// This file owns the pass's hashers (log_pass.go reads the rows and hands
// each poll's, in leaf order, to its own): each hashes its poll's rows as
// hashRows does, keeping what it learns of an answer by its number.

// hash hashes the batches of rows, in leaf order, with a leafHasher, as
// hashRows does, until the work channel is closed. What it learns of an
// answer it keeps by the answer's number.
func (pp *passPoll) hash() {
	defer close(pp.done)
	lh := newLeafHasher(pp.id, int(max(1, min(passBatch, pp.size))))
	var (
		facts   []answerFacts
		answers []string // the poll's, by number, as of the last batch
	)
	for w := range pp.work {
		answers = w.answers
		for len(facts) < len(w.answers) {
			facts = append(facts, answerFacts{})
		}
		// The batch's text, read in place: no string made of it outlives
		// the batch, which goes back to the reader below.
		text := unsafe.String(unsafe.SliceData(w.text), len(w.text))
		for i := range w.rows {
			if pp.err != nil {
				break // drain
			}
			pp.err = pp.hashRow(lh, text, w.answers, &w.rows[i], facts)
		}
		select {
		case pp.spares <- passWork{rows: w.rows[:0], text: w.text[:0]}:
		default:
		}
	}
	if pp.err == nil {
		pp.err = lh.flush()
	}
	pp.out = lh.h
	if pp.last != nil {
		pp.out.last = pp.last.counts(answers)
	}
	if pp.err == nil {
		pp.compareTiles()
	}
}

// compareTiles compares the full tiles the poll's rows made with the
// stored ones, when they are read beside the pass (else checkHashed reads
// and compares them), once they are read.
func (pp *passPoll) compareTiles() {
	if pp.tiles == nil {
		return
	}
	<-pp.tiles.done
	if pp.tiles.err == nil { // else checkHashed reports it
		leaf, what := tileDifference(pp.out.full, func(fn func(level int16, idx int64, data []byte)) error {
			pp.tiles.tiles.each(pp.id, fn)
			return nil
		})
		pp.out.tilesCompared, pp.out.tiles = true, tileVerdict{leaf, what}
	}
}

// hashRow hashes r, the next leaf, a row of a batch whose text is text
// and whose poll's answers so far are answers.
func (pp *passPoll) hashRow(lh *leafHasher, text string, answers []string, r *passRow, facts []answerFacts) error {
	if r.seq < 0 {
		return lh.addDefinition(*pp.defs[-r.seq]) // catchUp made sure it is the poll's
	}
	var (
		answer string
		f      = &answerFacts{}
	)
	if r.answer >= 0 {
		answer, f = answers[r.answer], &facts[r.answer]
	} else {
		answer = strings.Clone(text[r.start:r.a]) // the leaf hasher may keep it
	}
	// The leaf EventOf's event would make, made at once, with the
	// answer's form asked once.
	if f.choice == formUnknown {
		f.choice = formBallot
		if isChoice(answer) {
			f.choice = formChoice
		}
	}
	l := audit.Leaf{PollID: pp.id, PrincipalID: text[r.a:r.p], ClientEventID: text[r.p:r.end], ReceivedAt: time.UnixMicro(r.received).UTC()}
	if pp.last != nil {
		pp.last.note(l.PrincipalID, r.answer, answer)
	}
	if f.choice == formChoice {
		l.CandidateID = answer
	} else {
		l.Ballot = answer
	}
	return lh.addLeaf(l, r.fpWrong, f)
}

// passRowsSQL reads the ledger's rows in the table's order, as the pass
// wants them, and passPollRowsSQL one poll's (pollRowsOf: a bitmap scan
// of the poll's rows, which still come in the table's order). Every
// poll's has no WHERE at all rather than "$1 IS NULL OR poll_id = $1":
// once PostgreSQL caches a generic plan for the prepared statement, that
// filter is evaluated on every row.
const (
	passRowsSQL = `
SELECT seq, poll_id, coalesce(ballot, candidate_id), principal_id, client_event_id, received_at, fingerprint FROM poll_events`
	passPollRowsSQL = `
SELECT seq, poll_id, coalesce(ballot, candidate_id), principal_id, client_event_id, received_at, fingerprint FROM poll_events e
WHERE ` + pollRowsOf
)

// pgEpoch is PostgreSQL's epoch, 2000-01-01T00:00:00Z, in Unix
// microseconds: a timestamptz in binary is microseconds from it.
const pgEpoch = 946_684_800_000_000
