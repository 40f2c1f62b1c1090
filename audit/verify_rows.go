package audit

import (
	"fmt"
	"io"

	"tally/vote"
)

// This file owns the audit's first stage: the export read row by row
// (ParseExportLine, export_line.go), each row appended to its poll's tree, and what one row can
// show checked (its leaf_index, a seq seen once, one row per principal
// in a poll whose first answer is final, its ballot one the definition in
// force takes).

// readExport reads every row, appends it to its poll's tree and checks
// what one row can show: its leaf_index, a seq seen once, one row per
// principal.
func (a *auditor) readExport(r io.Reader) error {
	err := EachLine(r, "export", func(line []byte, n int) error {
		row, err := ParseExportLine(line)
		if err != nil {
			return fmt.Errorf("export line %d: %v", n, err)
		}
		if row.Definition != nil {
			return a.readDefinition(row, n)
		}
		if row.ReceivedAt.IsZero() {
			return fmt.Errorf("export line %d: received_at is missing; the audit needs it, it is part of the leaf", n)
		}
		p := a.poll(row.PollID)
		index := p.tree.Size()
		if err := p.tree.AppendLeaf(row.Leaf()); err != nil {
			return fmt.Errorf("export line %d: %w", n, err)
		}
		a.rows++
		if index == 0 && !a.before[row.PollID] {
			a.discrepancy(Discrepancy{PollID: row.PollID, Leaves: &LeafRange{0, 0}, Field: "definition", ExportLine: n,
				Detail: "the poll's log begins with a vote, not its definition: a poll created since definitions are logged begins with one, " +
					"so it was removed (name the poll as from before definitions only if it was created before migration 00011)"})
		}
		a.checkRow(p, row, index, n)
		a.checkEligibleVote(p, row.PollID, row.PrincipalID, index, n)
		field, why := p.readVote(row)
		if why != "" {
			detail := why
			if p.def != nil {
				detail = fmt.Sprintf("%s (its definition at leaf %d)", why, p.defLeaf)
			}
			a.discrepancy(Discrepancy{PollID: row.PollID, Leaves: &LeafRange{index, index}, Field: field, ExportLine: n, Detail: detail})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	return nil
}

// eventKey is a principal's event id, the idempotency key of its votes.
type eventKey struct{ principal, event string }

// checkRow checks the row at index of poll p, read from line n: its seq
// seen once, its leaf_index its place, its (principal, event id) once in
// the export, its principal once in the poll unless the definition in
// force takes a principal's latest ballot.
func (a *auditor) checkRow(p *pollLog, row ExportRow, index int64, n int) {
	leaf := &LeafRange{index, index}
	if row.Seq != 0 {
		if first, ok := a.seqs[row.Seq]; ok {
			a.discrepancy(Discrepancy{PollID: row.PollID, Leaves: leaf, Field: "seq", ExportLine: n,
				Detail: fmt.Sprintf("seq %d is also the row of line %d: a ledger row appears twice", row.Seq, first)})
		} else {
			a.seqs[row.Seq] = n
		}
	}
	if row.LeafIndex != nil && *row.LeafIndex != index {
		a.discrepancy(Discrepancy{PollID: row.PollID, Leaves: leaf, Field: "leaf_index", ExportLine: n,
			Detail: fmt.Sprintf("the row says leaf_index %d but is the poll's leaf %d: a row before it is missing, added or moved", *row.LeafIndex, index)})
	}
	key := eventKey{row.PrincipalID, row.EventID}
	if first, ok := a.keys[key]; ok {
		a.discrepancy(Discrepancy{PollID: row.PollID, Leaves: leaf, Field: "event_id", ExportLine: n,
			Detail: fmt.Sprintf("principal %s used event id %s at export line %d too: the ledger holds one row per principal and event id, "+
				"across polls (intake answers a reused one 409)", row.PrincipalID, row.EventID, first)})
	} else {
		a.keys[key] = n
	}
	code, seen := p.voter(row.PrincipalID, index)
	if p.def != nil && p.def.BallotRules().Answers == vote.AnswersLatest {
		return // each new ballot replaces the one before (recount.go)
	}
	if seen {
		a.discrepancy(Discrepancy{PollID: row.PollID, Leaves: leaf, Field: "principal_id", ExportLine: n,
			Detail: fmt.Sprintf("principal %s already answered this poll at leaf %d; the ledger holds one answer per principal and poll", row.PrincipalID, p.firstLeaf[code])})
	}
}

// voter is the code of principal id in p, and whether it voted before
// index; a principal first seen at index gets a new code.
func (p *pollLog) voter(id string, index int64) (uint32, bool) {
	if code, ok := p.voters[id]; ok {
		return code, true
	}
	code := uint32(len(p.firstLeaf))
	p.voters[id] = code
	p.firstLeaf = append(p.firstLeaf, index)
	return code, false
}

// readDefinition appends the definition of line n to its poll's tree; it
// is in force from there on. It must follow the poll's definition before
// it, if any, as tally poll close would.
func (a *auditor) readDefinition(row ExportRow, n int) error {
	p := a.poll(row.PollID)
	index := p.tree.Size()
	h, err := DefinitionHash(*row.Definition)
	if err != nil {
		return fmt.Errorf("export line %d: %w", n, err)
	}
	if err := p.tree.Append(h); err != nil {
		return fmt.Errorf("export line %d: %w", n, err)
	}
	a.rows++
	a.definitions++
	leaf := &LeafRange{index, index}
	if row.LeafIndex != nil && *row.LeafIndex != index {
		a.discrepancy(Discrepancy{PollID: row.PollID, Leaves: leaf, Field: "leaf_index", ExportLine: n,
			Detail: fmt.Sprintf("the definition says leaf_index %d but is the poll's leaf %d: a line before it is missing, added or moved", *row.LeafIndex, index)})
	}
	if p.def != nil {
		if field, why := row.Definition.Follows(*p.def); why != "" {
			a.discrepancy(Discrepancy{PollID: row.PollID, Leaves: leaf, Field: field, ExportLine: n,
				Detail: fmt.Sprintf("%s of leaf %d: a poll's question may not change once asked, only close earlier", why, p.defLeaf)})
		}
	} else if index > 0 {
		p.undefined = index
	}
	p.def, p.defLeaf = row.Definition, index
	a.checkEligibleDefinition(p, row.Definition, index, n)
	p.addDefinition(row.Definition, index)
	return nil
}
