package audit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"tally/vote"
)

// This file owns the proofs a voter and an auditor check: inclusion of a
// leaf in a tree (RFC 6962 2.1.1, tlog's RecordProof), consistency of an
// older tree with a newer one (RFC 6962 2.1.2, tlog's TreeProof), and the
// receipt that carries a vote's inclusion proof to its voter.

// CheckInclusion checks that proof shows the leaf with hash leaf at index
// in the tree of size leaves whose root is root. The proof's hashes run
// from the leaf's sibling up to the root's child, as tlog and RFC 6962
// order them.
func CheckInclusion(pollID string, index int64, leaf tlog.Hash, size int64, root tlog.Hash, proof tlog.RecordProof) error {
	if index < 0 || index >= size {
		return fmt.Errorf("%w: poll %s: leaf index %d is not in a tree of size %d", ErrProof, pollID, index, size)
	}
	if err := tlog.CheckRecord(proof, size, root, index, leaf); err != nil {
		return fmt.Errorf("%w: poll %s: the inclusion proof of leaf %d (%d hashes) does not lead to the root of size %d", ErrProof, pollID, index, len(proof), size)
	}
	return nil
}

// CheckConsistency checks that proof shows the tree of size oldSize with
// root oldRoot to be a prefix of the tree of size newSize with root
// newRoot: every leaf the older tree held is still there, unchanged, at
// its index. Equal sizes need an empty proof and equal roots; an empty
// older tree is a prefix of every tree.
func CheckConsistency(pollID string, oldSize int64, oldRoot tlog.Hash, newSize int64, newRoot tlog.Hash, proof tlog.TreeProof) error {
	switch {
	case oldSize < 0 || oldSize > newSize:
		return fmt.Errorf("%w: poll %s: a tree of size %d cannot be a prefix of one of size %d", ErrProof, pollID, oldSize, newSize)
	case oldSize == 0:
		if len(proof) != 0 {
			return fmt.Errorf("%w: poll %s: the consistency proof from the empty tree must be empty, it has %d hashes", ErrProof, pollID, len(proof))
		}
		return nil
	}
	if err := tlog.CheckTree(proof, newSize, newRoot, oldSize, oldRoot); err != nil {
		return fmt.Errorf("%w: poll %s: the consistency proof (%d hashes) does not show the tree of size %d to be a prefix of the tree of size %d",
			ErrProof, pollID, len(proof), oldSize, newSize)
	}
	return nil
}

// VerifyConsistency checks that newer, a later checkpoint of the same
// poll, still holds everything older did. Both must have been opened
// (verified) already; they may be signed under different log names (a
// key rotation), but must be of the same poll.
func VerifyConsistency(older, newer Checkpoint, proof tlog.TreeProof) error {
	if older.PollID() != newer.PollID() {
		return fmt.Errorf("%w: checkpoint of %q against one of %q: both must be of one poll", ErrOrigin, older.Origin, newer.Origin)
	}
	return CheckConsistency(older.PollID(), older.Size, older.Root, newer.Size, newer.Root, proof)
}

// Receipt is what a voter keeps to check, offline, that their vote is a
// leaf of the poll's log: the leaf's fields, its index and hash, and its
// inclusion proof against a signed checkpoint. In JSON received_at is
// RFC 3339 in UTC with microseconds and hashes are base64. A vote of
// one choice has a CandidateID, any other a Ballot (Leaf.Ballot), which
// JSON carries raw, as the export does: "ballot":["a","c"].
type Receipt struct {
	PollID         string           `json:"poll_id"`
	CandidateID    string           `json:"candidate_id,omitempty"`
	Ballot         string           `json:"-"`
	PrincipalID    string           `json:"principal_id"`
	EventID        string           `json:"event_id"` // the client's event id, as in the leaf
	ReceivedAt     time.Time        `json:"received_at"`
	LeafIndex      int64            `json:"leaf_index"`
	LeafHash       tlog.Hash        `json:"leaf_hash"`
	TreeSize       int64            `json:"tree_size"`
	Checkpoint     string           `json:"checkpoint"` // the signed note text
	InclusionProof tlog.RecordProof `json:"inclusion_proof"`
}

// ReceivedAtLayout is how a receipt writes received_at: RFC 3339 in UTC,
// always with six fractional digits, the leaf's precision.
const ReceivedAtLayout = "2006-01-02T15:04:05.000000Z07:00"

// NewReceipt assembles the receipt of the leaf l at index, proved by proof
// against checkpoint, a signed checkpoint of size treeSize. It computes the
// leaf hash; it does not verify (VerifyReceipt does).
func NewReceipt(l Leaf, index int64, treeSize int64, checkpoint []byte, proof tlog.RecordProof) (Receipt, error) {
	h, err := LeafHash(l)
	if err != nil {
		return Receipt{}, err
	}
	return Receipt{PollID: l.PollID, CandidateID: l.CandidateID, Ballot: l.Ballot, PrincipalID: l.PrincipalID, EventID: l.ClientEventID,
		ReceivedAt: l.ReceivedAt.UTC().Truncate(time.Microsecond), LeafIndex: index, LeafHash: h, TreeSize: treeSize,
		Checkpoint: string(checkpoint), InclusionProof: proof}, nil
}

// Leaf is the leaf the receipt's fields describe.
func (r Receipt) Leaf() Leaf {
	return Leaf{PollID: r.PollID, CandidateID: r.CandidateID, Ballot: r.Ballot, PrincipalID: r.PrincipalID, ClientEventID: r.EventID, ReceivedAt: r.ReceivedAt}
}

type receiptJSON Receipt // Receipt's fields without its methods

// MarshalJSON writes received_at with ReceivedAtLayout, the ballot raw
// after poll_id, and an empty proof as [] rather than null.
func (r Receipt) MarshalJSON() ([]byte, error) {
	if r.InclusionProof == nil {
		r.InclusionProof = tlog.RecordProof{}
	}
	var ballot json.RawMessage
	if r.Ballot != "" {
		ballot = json.RawMessage(r.Ballot)
	}
	return json.Marshal(struct {
		PollID string          `json:"poll_id"`
		Ballot json.RawMessage `json:"ballot,omitempty"`
		receiptJSON
		ReceivedAt string `json:"received_at"`
	}{r.PollID, ballot, receiptJSON(r), r.ReceivedAt.UTC().Format(ReceivedAtLayout)})
}

// ParseReceipt reads a receipt in JSON, refusing unknown fields, so that a
// misspelt field is named rather than read as missing, and reading
// received_at as the export does (timeField): a finer time than the
// leaf's microseconds, or one before 1970, is refused, not truncated.
func ParseReceipt(b []byte) (Receipt, error) {
	keys, err := checkKeys(b, receiptKeys)
	if err != nil {
		return Receipt{}, fmt.Errorf("%w receipt: %v", ErrMalformed, err)
	}
	for k, v := range keys {
		if string(v) == "null" {
			return Receipt{}, fmt.Errorf("%w receipt: %s is null; a receipt gives every field it has", ErrMalformed, k)
		}
	}
	for _, k := range []string{"poll_id", "principal_id", "event_id", "leaf_index", "leaf_hash", "tree_size", "inclusion_proof"} {
		if _, ok := keys[k]; !ok && keys != nil {
			return Receipt{}, fmt.Errorf("%w receipt: %s is missing; a receipt has %s", ErrMalformed, k, strings.Join(receiptKeys, ", "))
		}
	}
	if _, c := keys["candidate_id"]; keys != nil && c == (keys["ballot"] != nil) {
		return Receipt{}, fmt.Errorf("%w receipt: it has %s: a vote of one choice has candidate_id, any other a ballot, never both", ErrMalformed,
			map[bool]string{true: "both candidate_id and ballot", false: "neither candidate_id nor ballot"}[c])
	}
	if at, ok := keys["received_at"]; ok {
		// As the export reads it: at most six fractional digits, from 1970.
		if _, err := timeField("received_at", at); err != nil {
			return Receipt{}, fmt.Errorf("%w receipt: %v", ErrMalformed, err)
		}
	}
	var rb struct {
		receiptJSON
		Ballot json.RawMessage `json:"ballot"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rb); err != nil {
		return Receipt{}, fmt.Errorf("%w receipt: %v", ErrMalformed, err)
	}
	r := rb.receiptJSON
	if rb.Ballot != nil {
		var row ExportRow
		if err := row.setBallot(rb.Ballot); err != nil {
			return Receipt{}, fmt.Errorf("%w receipt: %v", ErrMalformed, err)
		}
		r.Ballot = row.Ballot
	}
	if dec.More() {
		return Receipt{}, fmt.Errorf("%w receipt: data follows the JSON object", ErrMalformed)
	}
	if r.ReceivedAt.IsZero() {
		return Receipt{}, fmt.Errorf("%w receipt: received_at is missing", ErrMalformed)
	}
	if r.Checkpoint == "" {
		return Receipt{}, fmt.Errorf("%w receipt: checkpoint is missing", ErrMalformed)
	}
	return Receipt(r), nil
}

// statusKeys are the keys of a vote's status as GET /v1/votes/{event_id}
// answers it, which carries the receipt once there is one.
var statusKeys = []string{"event_id", "poll_id", "candidate_id", "ballot", "status", "reason", "superseded_by", "receipt"}

// ReceiptOf reads b, a receipt or a vote's status that carries one: an
// object with the key "status" is a status, whose keys are read as
// strictly as a receipt's (statusKeys, spelt exactly, each once, no
// other), and ReceiptOf returns its receipt (nil when it has none yet,
// or it is null) and its status; anything else is returned as it is, for
// ParseReceipt.
func ReceiptOf(b []byte) (receipt []byte, status string, err error) {
	keys, err := checkKeys(b, statusKeys)
	if err != nil {
		return nil, "", fmt.Errorf("%w vote status: %v", ErrMalformed, err)
	}
	st, ok := keys["status"]
	if !ok {
		return b, "", nil
	}
	for k := range keys {
		if !slices.Contains(statusKeys, k) {
			return nil, "", fmt.Errorf("%w vote status: unknown key %q; a vote's status has the keys %s, and a receipt has no \"status\"",
				ErrMalformed, k, strings.Join(statusKeys, ", "))
		}
	}
	if err := json.Unmarshal(st, &status); err != nil {
		return nil, "", fmt.Errorf("%w vote status: status is %s, not a string", ErrMalformed, st)
	}
	if r := keys["receipt"]; len(r) > 0 && string(r) != "null" {
		receipt = r
	}
	return receipt, status, nil
}

// receiptKeys are a receipt's keys, spelt exactly and each given once
// (ParseReceipt): encoding/json alone would read "Candidate_ID" beside
// "candidate_id", or the last of two, as another vote than a reader that
// matches exactly.
var receiptKeys = []string{"poll_id", "candidate_id", "ballot", "principal_id", "event_id", "received_at",
	"leaf_index", "leaf_hash", "tree_size", "checkpoint", "inclusion_proof"}

// VerifyReceipt checks r: the leaf hash is the hash of the receipt's
// fields, the checkpoint is signed by verifier for this poll of the log
// logName (the verifier key's name) at the receipt's tree size, and the
// inclusion proof leads from the leaf to the checkpoint's root. It returns
// the opened checkpoint, for a later consistency check.
func VerifyReceipt(r Receipt, verifier note.Verifier, logName string) (Checkpoint, error) {
	h, err := LeafHash(r.Leaf())
	if err != nil {
		return Checkpoint{}, fmt.Errorf("%w receipt: %v", ErrMalformed, err)
	}
	if h != r.LeafHash {
		return Checkpoint{}, fmt.Errorf("%w: poll %s leaf %d: the receipt's fields hash to %s, not to its leaf_hash %s: a field was changed",
			ErrProof, r.PollID, r.LeafIndex, h, r.LeafHash)
	}
	cp, err := OpenCheckpoint([]byte(r.Checkpoint), verifier, Origin(logName, r.PollID))
	if err != nil {
		return Checkpoint{}, fmt.Errorf("receipt of poll %s leaf %d: %w", r.PollID, r.LeafIndex, err)
	}
	if cp.Size != r.TreeSize {
		return Checkpoint{}, fmt.Errorf("%w: poll %s leaf %d: the receipt says tree size %d, its checkpoint %d",
			ErrProof, r.PollID, r.LeafIndex, r.TreeSize, cp.Size)
	}
	if err := CheckInclusion(r.PollID, r.LeafIndex, r.LeafHash, cp.Size, cp.Root, r.InclusionProof); err != nil {
		return Checkpoint{}, err
	}
	return cp, nil
}

// ConsistencyProof is a consistency proof as tally serves it (GET
// /v1/polls/{poll_id}/consistency, tally log consistency): the tree of
// size From, whose root is FromRoot, is a prefix of the tree of size To,
// whose root is ToRoot.
type ConsistencyProof struct {
	PollID   string         `json:"poll_id"`
	From     int64          `json:"from"`
	To       int64          `json:"to"`
	Proof    tlog.TreeProof `json:"proof"`
	FromRoot tlog.Hash      `json:"from_root"`
	ToRoot   tlog.Hash      `json:"to_root"`
}

// consistencyKeys are a consistency proof's keys: every one required,
// spelt exactly, given once, none null, and no other.
var consistencyKeys = []string{"poll_id", "from", "to", "proof", "from_root", "to_root"}

// ParseConsistencyProof reads a ConsistencyProof in JSON as strictly as
// a receipt: its keys exactly consistencyKeys, and nothing after the
// object.
func ParseConsistencyProof(b []byte) (ConsistencyProof, error) {
	const shape = `it is {"poll_id", "from", "to", "proof": [base64 hashes], "from_root", "to_root"}, as GET /v1/polls/{poll_id}/consistency answers`
	keys, err := checkKeys(b, consistencyKeys)
	if err != nil {
		return ConsistencyProof{}, fmt.Errorf("%w consistency proof: %v; %s", ErrMalformed, err, shape)
	}
	for k, v := range keys {
		switch {
		case !slices.Contains(consistencyKeys, k):
			return ConsistencyProof{}, fmt.Errorf("%w consistency proof: unknown key %q; %s", ErrMalformed, k, shape)
		case string(v) == "null":
			return ConsistencyProof{}, fmt.Errorf("%w consistency proof: %s is null; %s", ErrMalformed, k, shape)
		}
	}
	for _, k := range consistencyKeys {
		if _, ok := keys[k]; !ok && keys != nil {
			return ConsistencyProof{}, fmt.Errorf("%w consistency proof: %s is missing; %s", ErrMalformed, k, shape)
		}
	}
	var p ConsistencyProof
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&p); err != nil {
		return ConsistencyProof{}, fmt.Errorf("%w consistency proof: %v; %s", ErrMalformed, err, shape)
	}
	if dec.More() {
		return ConsistencyProof{}, fmt.Errorf("%w consistency proof: data follows the JSON object", ErrMalformed)
	}
	if !vote.ValidID(p.PollID) {
		return ConsistencyProof{}, fmt.Errorf("%w consistency proof: poll_id %q is invalid: ids are "+vote.IDRule, ErrMalformed, p.PollID)
	}
	if p.From < 0 || p.To < p.From {
		return ConsistencyProof{}, fmt.Errorf("%w consistency proof: from %d to %d: from must be 0 to to", ErrMalformed, p.From, p.To)
	}
	return p, nil
}

// Verify checks that p shows newer, a later checkpoint, to hold everything
// older did: p is of older's poll, from older's size to newer's, says
// their roots, and leads from one root to the other (VerifyConsistency). Its poll is checked
// first: between equal sizes every proof is empty, so a proof of another
// poll would otherwise pass.
func (p ConsistencyProof) Verify(older, newer Checkpoint) error {
	if poll := older.PollID(); p.PollID != poll {
		return fmt.Errorf("%w: the consistency proof is of poll %q, but the checkpoint it starts from is of poll %q: use the consistency proof of poll %s",
			ErrOrigin, p.PollID, poll, poll)
	}
	if p.From != older.Size || p.To != newer.Size {
		return fmt.Errorf("%w: poll %s: the consistency proof is from size %d to %d, but the older checkpoint has %d leaves and the later one %d",
			ErrProof, p.PollID, p.From, p.To, older.Size, newer.Size)
	}
	if p.FromRoot != older.Root || p.ToRoot != newer.Root {
		return fmt.Errorf("%w: poll %s: the consistency proof says the roots %s (size %d) and %s (size %d), the checkpoints %s and %s: "+
			"the proof is of other trees than the checkpoints'", ErrProof, p.PollID, p.FromRoot, p.From, p.ToRoot, p.To, older.Root, newer.Root)
	}
	return VerifyConsistency(older, newer, p.Proof)
}
