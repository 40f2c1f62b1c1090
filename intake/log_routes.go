package intake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"tally/audit"
	"tally/intake/internal/problem"
	"tally/ledger"
)

// This file owns what intake serves of each poll's Merkle log: GET
// /v1/polls/{poll_id}/checkpoint (the latest signed checkpoint), GET
// /v1/polls/{poll_id}/consistency (a proof that one tree size is a prefix
// of another) and the receipt GET /v1/votes/{event_id} carries for a
// recorded vote. A poll's log tells how many votes it holds, so it is
// shown to whoever may see the poll's results and to no one else: a
// principal outside a restricted poll's list gets the unknown-poll 404.
// Nothing here is cached: proofs are read from PostgreSQL each time, and
// reads are limited per principal as every read is.

var (
	// no-checkpoint: the poll exists but its log has no signed checkpoint
	// yet (the projector signs them when it runs with --log-key).
	probNoCheckpoint = problemType{Slug: "no-checkpoint", Title: "The poll's log has no signed checkpoint"}
	// invalid-tree-size: the tree sizes of a consistency proof are not
	// whole numbers, out of order, or beyond the poll's log.
	probTreeSize = problemType{Slug: "invalid-tree-size", Title: "The tree sizes asked for are invalid"}
)

// handleCheckpoint answers the poll's latest signed checkpoint, the note's
// text exactly as the projector signed it, which tally audit reads.
func (s *Server) handleCheckpoint(w http.ResponseWriter, r *http.Request) {
	p, ok := s.principal(w, r)
	if !ok {
		return
	}
	id, ok := problem.PathID(w, r, "poll_id", "poll id")
	if !ok || !s.visiblePoll(w, r, p, id) {
		return
	}
	var cp ledger.Checkpoint
	err := s.readLedger(r.Context(), func(ctx context.Context) (err error) {
		cp, err = s.store.LatestCheckpoint(ctx, id)
		return err
	})
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		writeProblem(w, http.StatusNotFound, probNoCheckpoint, fmt.Sprintf(
			"poll %q has no signed checkpoint yet: checkpoints appear once the projector runs with a log signer key "+
				"and has applied a vote on the poll; ask again later", id), 0)
	case err != nil:
		s.ledgerFailed(w, r, "checkpoint lookup failed", err)
	default:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, cp.Note)
	}
}

// handleConsistency answers a proof that the poll's tree of ?from leaves
// is a prefix of its tree of ?to leaves (the current size when to is
// absent).
func (s *Server) handleConsistency(w http.ResponseWriter, r *http.Request) {
	p, ok := s.principal(w, r)
	if !ok {
		return
	}
	id, ok := problem.PathID(w, r, "poll_id", "poll id")
	if !ok || !s.visiblePoll(w, r, p, id) {
		return
	}
	from, to, ok := treeSizes(w, r.URL.Query())
	if !ok {
		return
	}
	var c ledger.Consistency
	err := s.readLedger(r.Context(), func(ctx context.Context) (err error) {
		c, err = s.store.ConsistencyProof(ctx, id, from, to)
		return err
	})
	switch {
	case errors.Is(err, ledger.ErrBadProofRequest):
		what := fmt.Sprintf("to=%d is", to)
		if to == 0 {
			what = fmt.Sprintf("from=%d is", from)
		}
		writeProblem(w, http.StatusBadRequest, probTreeSize, what+" beyond the poll's log: ask for sizes it holds "+
			"(GET /v1/polls/{poll_id}/checkpoint names the latest signed size; leave out to for the current size)", 0)
	case errors.Is(err, ledger.ErrNotFound):
		problem.WriteUnknownPoll(w, id)
	case err != nil:
		s.ledgerFailed(w, r, "consistency proof failed", err)
	default:
		proof := c.Proof
		if proof == nil {
			proof = tlog.TreeProof{} // [] rather than null, for equal sizes
		}
		writeJSON(w, http.StatusOK, audit.ConsistencyProof{PollID: id, From: c.From, To: c.To, Proof: proof,
			FromRoot: c.FromRoot, ToRoot: c.ToRoot})
	}
}

// treeSizes reads the query's from (required) and to (0 when absent), or
// answers 400 saying what is wrong and returns false.
func treeSizes(w http.ResponseWriter, q url.Values) (from, to int64, ok bool) {
	from, err := querySize(q, "from")
	if err == nil && from == 0 {
		err = errors.New("from is missing")
	}
	if err == nil {
		to, err = querySize(q, "to")
	}
	if err == nil && to != 0 && from > to {
		err = fmt.Errorf("from=%d is past to=%d: a tree can only be a prefix of one at least its size", from, to)
	}
	if err != nil {
		writeProblem(w, http.StatusBadRequest, probTreeSize, err.Error()+
			": ask for ?from=N&to=M, tree sizes with 1 <= N <= M (to may be left out: the log's current size)", 0)
		return 0, 0, false
	}
	return from, to, true
}

// querySize reads the tree size q gives name, 0 when it gives none.
func querySize(q url.Values, name string) (int64, error) {
	vs := q[name]
	switch {
	case len(vs) == 0:
		return 0, nil
	case len(vs) > 1:
		return 0, fmt.Errorf("%s is given %d times, give it once", name, len(vs))
	}
	n, err := strconv.ParseInt(vs[0], 10, 64)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%s=%s is not a whole number", name, quoteClip(vs[0]))
	case n < 1:
		return 0, fmt.Errorf("%s=%d is not a tree size, which is at least 1", name, n)
	}
	return n, nil
}

// receipt is the receipt of p's recorded event rec: its leaf's inclusion
// proof against the poll's latest signed checkpoint. It is nil while no
// checkpoint covers the leaf, and for a principal that may no longer see
// the poll (the checkpoint would tell it how many votes the poll holds).
func (s *Server) receipt(ctx context.Context, p *voter, rec ledger.EventRecord) (*audit.Receipt, error) {
	pi, err := s.catalog.lookup([]byte(rec.PollID))
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	case !pi.mayVote(p.ID):
		return nil, nil
	}
	if rec.LeafIndex < 0 {
		return nil, fmt.Errorf("poll %s: the ledger row of seq %d is in no leaf of the log: tally rebuild names what was changed", rec.PollID, rec.Seq)
	}
	var (
		cp ledger.Checkpoint
		in ledger.Inclusion
	)
	err = s.readLedger(ctx, func(ctx context.Context) error {
		var err error
		if cp, err = s.store.LatestCheckpoint(ctx, rec.PollID); err != nil {
			return err
		}
		if cp.Size <= rec.LeafIndex {
			return nil
		}
		in, err = s.store.InclusionProof(ctx, rec.PollID, rec.LeafIndex, cp.Size)
		return err
	})
	switch {
	case errors.Is(err, ledger.ErrNotFound) || err == nil && cp.Size <= rec.LeafIndex:
		return nil, nil
	case err != nil:
		return nil, err
	case in.Root != cp.Root:
		return nil, fmt.Errorf("poll %s: the log's root at size %d is %s, its signed checkpoint's %s: the log changed after it was signed",
			rec.PollID, cp.Size, in.Root, cp.Root)
	}
	rc, err := audit.NewReceipt(rec.Leaf(), rec.LeafIndex, cp.Size, []byte(cp.Note), in.Proof)
	if err != nil {
		return nil, fmt.Errorf("receipt of poll %s leaf %d: %w", rec.PollID, rec.LeafIndex, err)
	}
	return &rc, nil
}

// visiblePoll reports whether p may see poll id's log, as its results:
// the poll exists and p may vote on it. Otherwise it answers the
// unknown-poll 404 (or 503 when the catalog could not tell) and returns
// false.
func (s *Server) visiblePoll(w http.ResponseWriter, r *http.Request, p *voter, id string) bool {
	pi, err := s.catalog.lookup([]byte(id))
	switch {
	case errors.Is(err, ledger.ErrNotFound) || err == nil && !pi.mayVote(p.ID):
		problem.WriteUnknownPoll(w, id)
	case err != nil:
		s.ledgerFailed(w, r, "poll lookup failed", err)
	default:
		return true
	}
	return false
}

// readLedger runs read with a context bounded by Config.PostgresTimeout,
// unless PostgreSQL is not to be tried now (errPostgresDown), and tells
// pgState whether PostgreSQL answered: a request it refused (ErrInvalid)
// is an answer.
func (s *Server) readLedger(ctx context.Context, read func(context.Context) error) error {
	if s.pg.skip(time.Now()) {
		return errPostgresDown
	}
	lctx, cancel := context.WithTimeout(ctx, s.cfg.PostgresTimeout)
	defer cancel()
	err := read(lctx)
	if errors.Is(err, ledger.ErrInvalid) {
		s.pg.observe(ctx, nil)
	} else {
		s.pg.observe(ctx, err)
	}
	return err
}

// ledgerFailed logs err (unless intake did not try PostgreSQL) and answers
// 503.
func (s *Server) ledgerFailed(w http.ResponseWriter, r *http.Request, msg string, err error) {
	if !errors.Is(err, errPostgresDown) {
		s.failed(r, msg, err)
	}
	writeLedgerDown(w)
}
