package cli

import (
	"errors"
	"fmt"

	ucli "github.com/urfave/cli/v2"
	"golang.org/x/mod/sumdb/tlog"

	"tally/audit"
	"tally/ledger"
)

// This file owns the proofs tally log answers from the database, as intake
// answers them over HTTP: tally log prove (a vote's inclusion proof, as a
// receipt) and tally log consistency (a proof between two tree sizes).

// logProveCommand is tally log prove.
func logProveCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "prove",
		Usage: "print a vote's inclusion proof in its poll's log, as a receipt (exit 1 when there is none)",
		Description: "Against the poll's latest signed checkpoint, the output is the receipt GET /v1/votes/{event_id}\n" +
			"answers, which tally audit receipt FILE --key VERIFIER_KEY checks. With --size N it proves\n" +
			"against the tree of N leaves: with the checkpoint of that size when one was signed, else\n" +
			"against the root the log holds at that size (checkpoint empty, root given), which no key vouches for.",
		Flags: commonFlags(
			&ucli.StringFlag{Name: "poll", Required: true, Usage: "the poll's `ID`"},
			&ucli.StringFlag{Name: "event-id", Required: true, Usage: "the client's event `ID` of the vote"},
			&ucli.StringFlag{Name: "principal", Required: true, Usage: "the `ID` of the principal that sent it"},
			&ucli.Int64Flag{Name: "size", Usage: "prove against the tree of `N` leaves", DefaultText: "the latest signed checkpoint's"},
		),
		Action: logProve,
	}
}

// logConsistencyCommand is tally log consistency.
func logConsistencyCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "consistency",
		Usage: "print a consistency proof between two sizes of a poll's log",
		Description: "The JSON is what GET /v1/polls/{poll_id}/consistency answers and\n" +
			"tally audit receipt --consistency FILE reads: the tree of --from leaves is a prefix of the tree of --to.",
		Flags: commonFlags(
			&ucli.StringFlag{Name: "poll", Required: true, Usage: "the poll's `ID`"},
			&ucli.Int64Flag{Name: "from", Required: true, Usage: "the older tree's size `N`, at least 1", DefaultText: "none"},
			&ucli.Int64Flag{Name: "to", Usage: "the newer tree's size `M`", DefaultText: "the log's current size"},
		),
		Action: logConsistency,
	}
}

// unsignedProof is tally log prove's answer for a size no checkpoint was
// signed at: a receipt's fields with the root in place of the checkpoint.
type unsignedProof struct {
	PollID         string           `json:"poll_id"`
	CandidateID    string           `json:"candidate_id"`
	PrincipalID    string           `json:"principal_id"`
	EventID        string           `json:"event_id"`
	ReceivedAt     string           `json:"received_at"`
	LeafIndex      int64            `json:"leaf_index"`
	LeafHash       tlog.Hash        `json:"leaf_hash"`
	TreeSize       int64            `json:"tree_size"`
	Root           tlog.Hash        `json:"root"`
	Checkpoint     string           `json:"checkpoint"`
	InclusionProof tlog.RecordProof `json:"inclusion_proof"`
}

// logProve is tally log prove: the vote's receipt on standard output.
func logProve(c *ucli.Context) error {
	poll, size := c.String("poll"), c.Int64("size")
	if size < 0 {
		return fmt.Errorf("--size %d: a tree size is at least 1", size)
	}
	return withStore(c, func(store *ledger.Store) error {
		rec, err := recordedVote(c, store)
		if err != nil {
			return err
		}
		if rec.LeafIndex < 0 {
			return notProvable(c, fmt.Errorf("the vote's ledger row (seq %d) is in no leaf of poll %s's log: run tally rebuild, which names what was changed", rec.Seq, poll))
		}
		cp, found, err := checkpointAt(c, store, poll, size)
		if err != nil {
			return err
		}
		if !found && size == 0 {
			return notProvable(c, fmt.Errorf("poll %s has no signed checkpoint yet: run the projector with --log-key FILE, or give --size N to prove against the log's root", poll))
		}
		if found {
			size = cp.Size
		}
		in, err := store.InclusionProof(c.Context, poll, rec.LeafIndex, size)
		if errors.Is(err, ledger.ErrBadProofRequest) {
			return notProvable(c, fmt.Errorf("the vote is leaf %d, so --size %d must be past it and at most the log's size: %w", rec.LeafIndex, size, err))
		}
		if err != nil {
			return err
		}
		rc, err := audit.NewReceipt(rec.Leaf(), rec.LeafIndex, size, []byte(cp.Note), in.Proof)
		if err != nil {
			return err
		}
		if found {
			if in.Root != cp.Root {
				return notProvable(c, fmt.Errorf("poll %s: the log's root at size %d is %s, its signed checkpoint's %s: the log changed after it was signed", poll, size, in.Root, cp.Root))
			}
			return writeJSON(c.App.Writer, rc)
		}
		fmt.Fprintf(c.App.ErrWriter, "no checkpoint of size %d was signed: the proof is against the log's root, which tally audit receipt cannot check\n", size)
		return writeJSON(c.App.Writer, unsignedProof{PollID: rc.PollID, CandidateID: rc.CandidateID, PrincipalID: rc.PrincipalID,
			EventID: rc.EventID, ReceivedAt: rc.ReceivedAt.Format(audit.ReceivedAtLayout), LeafIndex: rc.LeafIndex, LeafHash: rc.LeafHash,
			TreeSize: size, Root: in.Root, InclusionProof: nonNil(in.Proof)})
	})
}

// recordedVote is the ledger's record of --principal's --event-id on
// --poll, or an exit-1 error saying why there is no proof of it.
func recordedVote(c *ucli.Context, store *ledger.Store) (ledger.EventRecord, error) {
	poll, id, who := c.String("poll"), c.String("event-id"), c.String("principal")
	rec, err := store.Event(c.Context, who, id)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return rec, notProvable(c, fmt.Errorf("the ledger has no event %q of principal %s: check both ids (a vote still in its stream is not in the ledger yet)", id, who))
	case err != nil:
		return rec, err
	case rec.Status != ledger.StatusRecorded:
		return rec, notProvable(c, fmt.Errorf("event %q of principal %s was rejected (%s): it is no leaf of the log", id, who, rec.Reason))
	case rec.PollID != poll:
		return rec, notProvable(c, fmt.Errorf("event %q of principal %s is a vote on poll %s, not %s", id, who, rec.PollID, poll))
	}
	return rec, nil
}

// checkpointAt is poll's checkpoint of size, or its latest when size is 0;
// found is false when there is none.
func checkpointAt(c *ucli.Context, store *ledger.Store, poll string, size int64) (cp ledger.Checkpoint, found bool, err error) {
	if size == 0 {
		cp, err = store.LatestCheckpoint(c.Context, poll)
		if errors.Is(err, ledger.ErrNotFound) {
			return cp, false, nil
		}
		return cp, err == nil, err
	}
	err = store.Checkpoints(c.Context, poll, func(k ledger.Checkpoint) error {
		if k.Size == size {
			cp, found = k, true
		}
		return nil
	})
	return cp, found, err
}

// logConsistency is tally log consistency: the proof on standard output.
func logConsistency(c *ucli.Context) error {
	poll, from, to := c.String("poll"), c.Int64("from"), c.Int64("to")
	switch {
	case from < 1:
		return fmt.Errorf("--from %d: a tree size is at least 1", from)
	case to != 0 && to < from:
		return fmt.Errorf("--from %d is past --to %d: a tree can only be a prefix of one at least its size", from, to)
	case to < 0:
		return fmt.Errorf("--to %d: a tree size is at least 1", to)
	}
	return withStore(c, func(store *ledger.Store) error {
		p, err := store.ConsistencyProof(c.Context, poll, from, to)
		switch {
		case errors.Is(err, ledger.ErrBadProofRequest):
			return notProvable(c, fmt.Errorf("%w: ask for sizes the log holds (leave out --to for its current size)", err))
		case errors.Is(err, ledger.ErrNotFound):
			return notProvable(c, fmt.Errorf("there is no poll %s: check the id (tally poll list)", poll))
		case err != nil:
			return err
		}
		proof := p.Proof
		if proof == nil {
			proof = tlog.TreeProof{}
		}
		return writeJSON(c.App.Writer, audit.ConsistencyProof{PollID: poll, From: p.From, To: p.To, Proof: proof,
			FromRoot: p.FromRoot, ToRoot: p.ToRoot})
	})
}

// notProvable prints err and makes the command exit 1: what was asked for does
// not exist.
func notProvable(c *ucli.Context, err error) error {
	fmt.Fprintln(c.App.ErrWriter, "tally:", err)
	return checkFailed(err)
}

// nonNil is p, or an empty proof: [] in JSON rather than null.
func nonNil(p tlog.RecordProof) tlog.RecordProof {
	if p == nil {
		return tlog.RecordProof{}
	}
	return p
}
