package audit

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

// This file owns the audit's second stage: every stored checkpoint opened
// with the key that signed it (OpenPollCheckpoint) and compared with its
// poll's tree, a root that differs placed after the largest size that
// matched.

// numbered is a stored checkpoint with its line in the checkpoints file.
type numbered struct {
	StoredCheckpoint
	line int
}

// checkCheckpoints opens every checkpoint and compares it with its poll's
// tree, poll by poll in order of size, so that a root that differs is
// placed between the largest size below it that matched and its own.
func (a *auditor) checkCheckpoints(cps []StoredCheckpoint, verifiers []note.Verifier) {
	byPoll := map[string][]numbered{}
	for i, c := range cps {
		a.poll(c.PollID) // a poll the export lacks is checked too
		byPoll[c.PollID] = append(byPoll[c.PollID], numbered{c, i + 1})
	}
	for _, id := range a.order {
		list := byPoll[id]
		slices.SortStableFunc(list, func(x, y numbered) int { return cmp.Compare(x.Size, y.Size) })
		matched := int64(0) // largest size whose root matched
		for _, c := range list {
			if a.checkCheckpoint(a.polls[id], c, verifiers, matched) {
				matched = max(matched, c.Size)
			}
		}
	}
}

// checkCheckpoint checks one stored checkpoint of poll p, placing a
// difference after matched, the largest size found equal so far. It
// reports whether the checkpoint verified and matched the tree.
func (a *auditor) checkCheckpoint(p *pollLog, c numbered, verifiers []note.Verifier, matched int64) bool {
	d := Discrepancy{PollID: c.PollID, CheckpointLine: c.line}
	cp, err := openStored(c.StoredCheckpoint, verifiers)
	if err != nil {
		d.Field, d.Detail = "checkpoint", err.Error()
		a.discrepancy(d)
		return false
	}
	if cp.Size != c.Size {
		d.Field, d.Detail = "size", fmt.Sprintf("the line says size %d, its signed checkpoint %d", c.Size, cp.Size)
		a.discrepancy(d)
		return false
	}
	n := p.tree.Size()
	if cp.Size > n {
		d.Leaves = &LeafRange{n, cp.Size - 1}
		d.Detail = fmt.Sprintf("the checkpoint is of %d leaves, the export holds %d: leaves the log had signed are missing from the export", cp.Size, n)
		a.discrepancy(d)
		return false
	}
	root, err := p.tree.Root(cp.Size)
	if err != nil {
		panic(err) // cp.Size <= n was checked
	}
	if root != cp.Root {
		d.Leaves = &LeafRange{matched, cp.Size - 1}
		d.Detail = fmt.Sprintf("the export's first %d leaves hash to root %s, the signed checkpoint says %s: a leaf from %d to %d was changed, removed, inserted or moved since it was signed",
			cp.Size, root, cp.Root, matched, cp.Size-1)
		a.discrepancy(d)
		return false
	}
	p.verified++
	p.largest = max(p.largest, cp.Size)
	return true
}

// openStored opens a stored checkpoint with whichever of verifiers signed
// it.
func openStored(c StoredCheckpoint, verifiers []note.Verifier) (Checkpoint, error) {
	cp, _, err := OpenPollCheckpoint([]byte(c.Checkpoint), verifiers, c.PollID)
	return cp, err
}

// OpenPollCheckpoint opens msg, a checkpoint of pollID, with whichever of
// verifiers signed it, under that key's name as the log name (several keys:
// checkpoints from before a key rotation still verify), and returns the
// verifier that did. A key that signed but does not verify, or a malformed
// note, is the error told; otherwise, that none of the keys signed it.
func OpenPollCheckpoint(msg []byte, verifiers []note.Verifier, pollID string) (Checkpoint, note.Verifier, error) {
	if len(verifiers) == 0 {
		return Checkpoint{}, nil, errors.New("no verifier key to open the checkpoint with")
	}
	var unsigned *unsignedError
	for _, v := range verifiers {
		cp, err := OpenCheckpoint(msg, v, Origin(v.Name(), pollID))
		if err == nil {
			return cp, v, nil
		}
		if !errors.As(err, &unsigned) {
			return Checkpoint{}, nil, err
		}
	}
	if len(verifiers) == 1 {
		return Checkpoint{}, nil, unsigned
	}
	keys := make([]string, len(verifiers))
	for i, v := range verifiers {
		keys[i] = keyName(v)
	}
	return Checkpoint{}, nil, fmt.Errorf("%w: the checkpoint is signed by none of the keys given (%s); it is signed by %s",
		ErrSignature, strings.Join(keys, ", "), unsigned.by)
}
