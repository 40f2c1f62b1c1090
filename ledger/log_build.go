package ledger

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/tlog"

	"tally/audit"
	"tally/vote"
)

// This file reads a poll's log back from its rows: hashRows hashes the
// rows in leaf order (rebuild's check, log_verify.go, and buildLog), and
// buildLog and BuildLogs make the log of a poll whose head has no root
// (rows from before the log, or tiles to make again).

// buildChunk is how many leaves buildLog hashes at a time.
const buildChunk = 1 << 16

// logRowsSQL reads a poll's leaves in leaf order, each with its ledger
// row, or its definition for a negative seq: NULLs where the row is gone.
const logRowsSQL = `
SELECT l.first_leaf + s.ord - 1, s.seq, e.poll_id, e.candidate_id, e.ballot, e.principal_id, e.client_event_id, e.received_at, e.fingerprint,
       ` + definitionCols + `
FROM poll_log_leaves l
CROSS JOIN LATERAL unnest(l.seqs) WITH ORDINALITY AS s(seq, ord)
LEFT JOIN poll_events e ON s.seq > 0 AND e.seq = s.seq
LEFT JOIN poll_definitions d ON s.seq < 0 AND d.id = -s.seq
WHERE l.poll_id = $1
ORDER BY l.first_leaf, s.ord`

// numberRowsSQL gives the rows of a poll that are in no leaf yet the
// next leaves, in the order of seq, buildChunk to a poll_log_leaves row:
// all its rows for a ledger from before the log, none for a log whose
// tiles are made again (migration 00009), the append's own for an append
// that builds its poll's log.
const numberRowsSQL = `
WITH next AS (
    SELECT coalesce(max(first_leaf + cardinality(seqs)), 0) AS leaf FROM poll_log_leaves WHERE poll_id = $1
)
INSERT INTO poll_log_leaves (poll_id, first_leaf, seqs, min_seq, max_seq)
SELECT $1, (SELECT leaf FROM next) + r.n / 65536 * 65536, array_agg(r.seq ORDER BY r.seq), min(r.seq), max(r.seq)
FROM (SELECT e.seq, row_number() OVER (ORDER BY e.seq) - 1 AS n
      FROM poll_events e
      LEFT JOIN (SELECT unnest(seqs) AS seq FROM poll_log_leaves WHERE poll_id = $1) l ON l.seq = e.seq
      WHERE e.poll_id = $1 AND l.seq IS NULL) r
GROUP BY r.n / 65536 ORDER BY 2`

// buildLog hashes every leaf of a poll whose head has no root (rows from
// before the log, or tiles to make again), numbering first its rows in
// no leaf (added of them are the append's own), and writes its leaves,
// tiles and head, in tx, which holds the head.
func buildLog(ctx context.Context, tx pgx.Tx, poll string, h *logHead, added int64) error {
	what := "build the log of poll " + poll
	if _, err := tx.Exec(ctx, numberRowsSQL, poll); err != nil {
		return interpretError(what, err)
	}
	hh, err := hashRows(ctx, tx, poll)
	if err != nil {
		return err
	}
	if hh.n != h.size+added {
		return fmt.Errorf("%s: %d leaves, but its head counts %d and the append added %d: run tally rebuild, which names what differs", what, hh.n, h.size, added)
	}
	var w logWrites
	w.add(poll, hh.state, hh.full)
	if err := w.exec(ctx, tx, what); err != nil {
		return err
	}
	h.state, h.built = hh.state, true
	return nil
}

// hashRows reads a poll's rows in leaf order and returns its log, the full
// tiles, the number of leaves, and the first leaf whose stored fingerprint
// is not vote.Fingerprint of its poll and candidate (-1: none; the leaf
// hash leaves the fingerprint out, yet an append compares it to tell a
// redelivered event from a key reused for another answer). A gap or a
// repeat in the leaf indexes, or a leaf whose row is gone or of another
// poll, is a *LogError naming the leaf.
func hashRows(ctx context.Context, tx pgx.Tx, poll string) (hashed, error) {
	what := "hash the log of poll " + poll
	rows, err := tx.Query(ctx, logRowsSQL, poll)
	if err != nil {
		return hashed{}, interpretError(what, err)
	}
	lh := newLeafHasher(poll, buildChunk)
	var (
		leaf, seq         int64
		rowPoll, cand, pr *string
		key, ballot       *string
		received          *time.Time
		fp                []byte
		def               definitionRow
	)
	_, err = pgx.ForEachRow(rows, append([]any{&leaf, &seq, &rowPoll, &cand, &ballot, &pr, &key, &received, &fp},
		def.targets()...), func() error {
		if leaf != lh.h.n {
			return &LogError{PollID: poll, Leaf: lh.h.n, Problem: leafGap(lh.h.n, leaf)}
		}
		if seq < 0 {
			if def.poll == nil {
				return &LogError{PollID: poll, Leaf: leaf, Problem: fmt.Sprintf("its definition (id %d) is missing: it was deleted", -seq)}
			}
			if *def.poll != poll {
				return &LogError{PollID: poll, Leaf: leaf, Problem: fmt.Sprintf("its definition (id %d) is poll %s's: the leaf moved", -seq, *def.poll)}
			}
			return lh.addDefinition(def.definition())
		}
		switch {
		case rowPoll == nil:
			return &LogError{PollID: poll, Leaf: leaf, Problem: fmt.Sprintf("its ledger row (seq %d) is missing: it was deleted", seq)}
		case *rowPoll != poll:
			return &LogError{PollID: poll, Leaf: leaf, Problem: fmt.Sprintf("its ledger row (seq %d) is poll %s's: the row was changed or the leaf moved", seq, *rowPoll)}
		}
		return lh.add(EventOf(*pr, *key, poll, *cand+deref(ballot), *received), string(fp))
	})
	if err == nil {
		err = lh.flush()
	}
	if err != nil {
		return hashed{}, interpretError(what, err)
	}
	return lh.h, nil
}

// leafHasher hashes a poll's leaves, given in leaf order, into its tree,
// and notes the first leaf whose stored fingerprint is not its poll's and
// candidate's, and the first that breaks the definitions (a vote the
// definition in force refuses, a definition that may not follow the one
// before). hashRows and the rebuild's one pass (log_pass.go) feed it.
type leafHasher struct {
	poll string
	h    hashed // rows is left to the caller
	// facts are what was learnt of each distinct answer (hashRows's; the
	// pass keeps its own, by the answer's number).
	facts  map[string]*answerFacts
	leaves audit.LeafHasher  // each distinct ballot checked once
	def    *audit.Definition // in force: the last one hashed
	gen    int               // counts the definitions hashed: def's generation
	chunk  []tlog.Hash       // hashed, not yet in the tree
}

// answerFacts is what a leafHasher learns once of a distinct answer of its
// poll, rather than for every row that gives it: a poll's ballots repeat
// (a ranked poll of 4 choices has 64 possible), and judging a ballot is
// most of what the definitions' check costs.
type answerFacts struct {
	fp    *[32]byte // vote.Fingerprint of the poll and the answer, once computed
	judge int       // the generation of the definition why is of; 0: none
	why   string    // the definition's RefusesBallot of the answer
	// choice says whether the answer is one choice (a single choice's
	// candidate) or a ballot of another kind, once the pass has asked.
	choice answerForm
}

// answerForm is whether an answer is one choice or a ballot.
type answerForm uint8

const (
	formUnknown answerForm = iota
	formChoice
	formBallot
)

// maxFingerprintsHeld bounds the distinct answers whose facts a leafHasher
// (or the pass, a poll's) keeps: a poll of few choices has few, but
// ballots of other kinds than single can be as many as the votes.
const maxFingerprintsHeld = 4096

// newLeafHasher hashes poll's leaves, adding them to the tree chunk at a
// time.
func newLeafHasher(poll string, chunk int) *leafHasher {
	return &leafHasher{poll: poll, h: hashed{state: emptyLog(), badFP: -1, badDef: -1}, facts: map[string]*answerFacts{},
		chunk: make([]tlog.Hash, 0, chunk)}
}

// add hashes the row of the next leaf, e (of lh's poll).
func (lh *leafHasher) add(e Event, fp string) error {
	answer := e.Answer()
	f, ok := lh.facts[answer]
	if !ok {
		f = &answerFacts{}
		if len(lh.facts) < maxFingerprintsHeld {
			lh.facts[answer] = f
		}
	}
	if f.fp == nil {
		want := vote.Fingerprint(lh.poll, answer)
		f.fp = &want
	}
	return lh.addLeaf(leafOf(e), fp != string(f.fp[:]), f)
}

// addLeaf is add of the leaf l, whose row's fingerprint is wrong when
// fpWrong, with what is known of the row's answer in f.
func (lh *leafHasher) addLeaf(l audit.Leaf, fpWrong bool, f *answerFacts) error {
	h, err := lh.leaves.Hash(l)
	if err != nil {
		return fmt.Errorf("leaf %d: %w", lh.h.n, err)
	}
	if lh.h.badFP < 0 && fpWrong {
		lh.h.badFP = lh.h.n
	}
	if lh.def != nil && lh.h.badDef < 0 {
		if why := lh.refusesVote(l, f); why != "" {
			lh.h.badDef, lh.h.defProblem = lh.h.n, why
		}
	}
	return lh.push(h)
}

// refusesVote is the definition in force's RefusesVote of l, whose
// answer's facts are f: its ballot is judged once per definition.
func (lh *leafHasher) refusesVote(l audit.Leaf, f *answerFacts) string {
	if f.judge != lh.gen {
		_, f.why = lh.def.RefusesBallot(l)
		f.judge = lh.gen
	}
	if f.why != "" {
		return f.why
	}
	_, why := lh.def.RefusesReceivedAt(l.ReceivedAt)
	return why
}

// addDefinition hashes the definition of the next leaf.
func (lh *leafHasher) addDefinition(d audit.Definition) error {
	h, err := audit.DefinitionHash(d)
	if err != nil {
		return fmt.Errorf("leaf %d: %w", lh.h.n, err)
	}
	if lh.def != nil && lh.h.badDef < 0 {
		if _, why := d.Follows(*lh.def); why != "" {
			lh.h.badDef, lh.h.defProblem = lh.h.n, why
		}
	}
	lh.def = &d
	lh.gen++
	lh.h.defs++
	return lh.push(h)
}

func (lh *leafHasher) push(h tlog.Hash) error {
	lh.chunk = append(lh.chunk, h)
	lh.h.n++
	if len(lh.chunk) == cap(lh.chunk) {
		return lh.flush()
	}
	return nil
}

// flush adds the hashed leaves to the tree.
func (lh *leafHasher) flush() error {
	next, full, err := lh.h.state.extend(lh.chunk)
	if err != nil {
		return err
	}
	lh.h.state, lh.chunk = next, lh.chunk[:0]
	lh.h.full = append(lh.h.full, full...)
	return nil
}

func leafGap(want, got int64) string {
	if got < want {
		return fmt.Sprintf("leaf index %d appears twice", got)
	}
	return fmt.Sprintf("leaf %d is missing (the next row is leaf %d)", want, got)
}

// LogError names a discrepancy in a poll's log: the poll, the first leaf
// concerned and what is wrong.
type LogError struct {
	PollID  string
	Leaf    int64
	Problem string
}

func (e *LogError) Error() string {
	return fmt.Sprintf("poll %s, leaf %d: %s", e.PollID, e.Leaf, e.Problem)
}

// BuildLogs hashes the rows of every poll whose log is still to build (rows
// from before the log existed; see migration 00004), one poll per
// transaction, and returns how many it built. `tally migrate up` runs it;
// an append to such a poll would build its log itself.
func (s *Store) BuildLogs(ctx context.Context) (int, error) {
	rows, err := s.pool.Query(ctx, `SELECT poll_id FROM poll_log_heads WHERE root IS NULL ORDER BY poll_id`)
	if err != nil {
		return 0, interpretError("list the logs to build", err)
	}
	polls, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, interpretError("list the logs to build", err)
	}
	built := 0
	for _, poll := range polls {
		start := time.Now()
		err := s.runTx(ctx, "build the log of poll "+poll, pgx.TxOptions{}, func(tx pgx.Tx) error {
			heads, err := lockHeads(ctx, tx, []string{poll})
			switch {
			case err != nil:
				return err
			case heads[poll] == nil:
				return fmt.Errorf("build the log of poll %s: it has no head", poll)
			case heads[poll].built:
				return nil // an append built it meanwhile
			}
			return buildLog(ctx, tx, poll, heads[poll], 0)
		})
		if err != nil {
			return built, err
		}
		built++
		s.cfg.Logger.Info("built a poll's log from its rows", "poll", poll, "took", time.Since(start).Round(time.Millisecond))
	}
	return built, nil
}

// definitionRow is a poll_definitions row as the log's readers scan it:
// nil where a leaf is a vote, or its definition is gone.
type definitionRow struct {
	poll, title *string
	opens       *time.Time
	closes      *time.Time
	eligible    []byte
	choices     []string
	rules       rulesRow
}

// definitionCols are the columns definitionRow.targets scans, of
// poll_definitions d.
const definitionCols = `d.poll_id, d.title, d.opens_at, d.closes_at, d.eligible_hash, d.choices, ` + rulesColsD

// targets are the scan targets of definitionCols.
func (r *definitionRow) targets() []any {
	return append([]any{&r.poll, &r.title, &r.opens, &r.closes, &r.eligible, &r.choices}, r.rules.targets()...)
}

func (r definitionRow) definition() audit.Definition {
	d := audit.Definition{PollID: *r.poll, Title: *r.title, OpensAt: *r.opens, Choices: slices.Clone(r.choices), Rules: r.rules.rules()}
	if r.closes != nil {
		t := *r.closes
		d.ClosesAt = &t
	}
	if len(r.eligible) == 32 {
		h := [32]byte(r.eligible)
		d.EligibleHash = &h
	}
	return d
}
