package audit

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"tally/vote"
)

// This file owns the audit of an export: each poll's tree rebuilt from the
// exported rows, every stored checkpoint checked against it, the tallies
// recounted and compared with published results. Whatever does not hold
// is a Discrepancy naming the poll, the leaves, the line and the field; an
// error means the audit could not be done at all (a file that is not in
// its format).

// ExportRow is one line of an export as tally export writes it. Each
// poll's rows come in its leaf order (which is not always the order of
// seq: two appends to one poll may commit in the other order than they
// drew their seqs); seq is the row's id in the ledger. recorded_at and fields this version does not know are ignored;
// leaf_index, when present, is checked against the row's place.
type ExportRow struct {
	Seq         int64     `json:"seq"`
	EventID     string    `json:"event_id"`
	PollID      string    `json:"poll_id"`
	CandidateID string    `json:"candidate_id"`
	PrincipalID string    `json:"principal_id"`
	ReceivedAt  time.Time `json:"received_at"`
	LeafIndex   *int64    `json:"leaf_index,omitempty"`
}

// Leaf is the row's leaf in its poll's log.
func (r ExportRow) Leaf() Leaf {
	return Leaf{PollID: r.PollID, CandidateID: r.CandidateID, PrincipalID: r.PrincipalID, ClientEventID: r.EventID, ReceivedAt: r.ReceivedAt}
}

// PublishedResults is a poll's results as GET /v1/polls/{id}/results
// answers them. TreeSize, when the results carry it, is the number of
// leaves they are the count of; without it they are compared with the
// whole export.
type PublishedResults struct {
	PollID   string  `json:"poll_id"`
	Results  []Tally `json:"results"`
	Total    int64   `json:"total"`
	TreeSize *int64  `json:"tree_size,omitempty"`
}

// Tally is a candidate's count of votes.
type Tally struct {
	CandidateID string `json:"candidate_id"`
	Votes       int64  `json:"votes"`
}

// ReadResults reads published results: JSON objects one after another (one
// per line, or as the endpoint answered them); fields other than poll_id,
// results, total and tree_size are ignored.
func ReadResults(r io.Reader) ([]PublishedResults, error) {
	dec := json.NewDecoder(r)
	var out []PublishedResults
	for n := 1; ; n++ {
		var p PublishedResults
		err := dec.Decode(&p)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("results object %d: %v; each is {\"poll_id\", \"results\": [{\"candidate_id\", \"votes\"}], \"total\"}", n, err)
		}
		if !vote.ValidID(p.PollID) {
			return nil, fmt.Errorf("results object %d: poll_id %q is invalid: ids are "+vote.IDRule, n, p.PollID)
		}
		out = append(out, p)
	}
}

// Report is what an audit found. Equal to the export means: every
// checkpoint verified and is a prefix of the export's tree, and every
// published result given equals the recount. Discrepancies lists each
// thing that did not hold.
type Report struct {
	Rows          int64         `json:"rows"`        // export rows read
	Checkpoints   int           `json:"checkpoints"` // stored checkpoints given
	Polls         []PollSummary `json:"polls"`
	Discrepancies []Discrepancy `json:"discrepancies"`
}

// OK reports whether the audit found nothing wrong.
func (r Report) OK() bool { return len(r.Discrepancies) == 0 }

// PollSummary is one poll as the export shows it.
type PollSummary struct {
	PollID              string    `json:"poll_id"`
	Leaves              int64     `json:"leaves"`
	Root                tlog.Hash `json:"root"`                 // of all the export's leaves
	CheckpointsVerified int       `json:"checkpoints_verified"` // signed, and a prefix of the export's tree
	LargestCheckpoint   int64     `json:"largest_checkpoint"`   // size of the largest verified, 0 if none
	Tallies             []Tally   `json:"tallies"`              // the recount, by candidate
	ResultsCompared     int       `json:"results_compared"`     // published results compared with the recount
}

// Discrepancy is one thing the audit found wrong. Leaves, when set, are
// the leaf indexes it concerns (one when First == Last); ExportLine and
// CheckpointLine are line numbers (from 1) of the files, 0 when it
// concerns none.
type Discrepancy struct {
	PollID         string     `json:"poll_id"`
	Leaves         *LeafRange `json:"leaves,omitempty"`
	Field          string     `json:"field,omitempty"`
	ExportLine     int        `json:"export_line,omitempty"`
	CheckpointLine int        `json:"checkpoint_line,omitempty"`
	Detail         string     `json:"detail"`
}

// LeafRange is the leaf indexes First to Last, both included.
type LeafRange struct {
	First int64 `json:"first"`
	Last  int64 `json:"last"`
}

func (d Discrepancy) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "poll %s", d.PollID)
	if d.Leaves != nil {
		if d.Leaves.First == d.Leaves.Last {
			fmt.Fprintf(&b, ", leaf %d", d.Leaves.First)
		} else {
			fmt.Fprintf(&b, ", leaves %d-%d", d.Leaves.First, d.Leaves.Last)
		}
	}
	if d.Field != "" {
		fmt.Fprintf(&b, ", field %s", d.Field)
	}
	if d.ExportLine > 0 {
		fmt.Fprintf(&b, ", export line %d", d.ExportLine)
	}
	if d.CheckpointLine > 0 {
		fmt.Fprintf(&b, ", checkpoint line %d", d.CheckpointLine)
	}
	return b.String() + ": " + d.Detail
}

// VerifyExport audits export (JSON lines as tally export writes them)
// against checkpoints (signed by one of verifiers, each under its own log
// name: several keys let checkpoints from before a key rotation verify)
// and, when results is not nil, against published results. The error is
// for input the audit cannot read; what does not verify is in the report.
func VerifyExport(export io.Reader, checkpoints []StoredCheckpoint, verifiers []note.Verifier, results []PublishedResults) (Report, error) {
	if len(verifiers) == 0 && len(checkpoints) > 0 {
		return Report{}, errors.New("audit: no verifier key to check the checkpoints with")
	}
	a := &auditor{polls: map[string]*pollLog{}, seqs: map[int64]int{}}
	if err := a.readExport(export); err != nil {
		return Report{}, err
	}
	a.checkCheckpoints(checkpoints, verifiers)
	a.compareResults(results)
	return a.report(len(checkpoints))
}

// auditor holds the polls an export rebuilt and what was found so far.
type auditor struct {
	polls map[string]*pollLog
	order []string // poll ids in order of first appearance
	rows  int64
	seqs  map[int64]int // the export line of each seq
	found []Discrepancy
}

// pollLog is one poll of the export: its tree and, per leaf, its
// candidate (as a small code, so a recount at any size is cheap).
type pollLog struct {
	tree       Tree
	candidates []string          // by code
	codes      map[string]uint32 // candidate id to code
	votes      []uint32          // code of each leaf's candidate
	principals map[string]int64  // principal id to its leaf
	verified   int
	largest    int64
	compared   int
}

func (a *auditor) poll(id string) *pollLog {
	p, ok := a.polls[id]
	if !ok {
		p = &pollLog{codes: map[string]uint32{}, principals: map[string]int64{}}
		a.polls[id] = p
		a.order = append(a.order, id)
	}
	return p
}

func (a *auditor) discrepancy(d Discrepancy) { a.found = append(a.found, d) }

// readExport reads every row, appends it to its poll's tree and checks
// what one row can show: its leaf_index, a seq seen once, one row per
// principal.
func (a *auditor) readExport(r io.Reader) error {
	err := eachLine(r, func(line []byte, n int) error {
		var row ExportRow
		if err := json.Unmarshal(line, &row); err != nil {
			return fmt.Errorf("export line %d: %v; each line is one object as tally export writes it", n, err)
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
		a.checkRow(p, row, index, n)
		code, ok := p.codes[row.CandidateID]
		if !ok {
			code = uint32(len(p.candidates))
			p.codes[row.CandidateID] = code
			p.candidates = append(p.candidates, row.CandidateID)
		}
		p.votes = append(p.votes, code)
		return nil
	})
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	return nil
}

// checkRow checks the row at index of poll p, read from line n.
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
	if first, ok := p.principals[row.PrincipalID]; ok {
		a.discrepancy(Discrepancy{PollID: row.PollID, Leaves: leaf, Field: "principal_id", ExportLine: n,
			Detail: fmt.Sprintf("principal %s already answered this poll at leaf %d; the ledger holds one answer per principal and poll", row.PrincipalID, first)})
	} else {
		p.principals[row.PrincipalID] = index
	}
}

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

// compareResults compares each published result with the recount of its
// poll at the size it counts.
func (a *auditor) compareResults(results []PublishedResults) {
	for i, pub := range results {
		p := a.polls[pub.PollID]
		if p == nil {
			p = a.poll(pub.PollID)
		}
		size := p.tree.Size()
		d := Discrepancy{PollID: pub.PollID}
		if pub.TreeSize != nil {
			if *pub.TreeSize < 0 || *pub.TreeSize > size {
				d.Field, d.Detail = "tree_size", fmt.Sprintf("results object %d counts %d leaves, the export holds %d", i+1, *pub.TreeSize, size)
				a.discrepancy(d)
				continue
			}
			size = *pub.TreeSize
		}
		p.compared++
		a.compareTallies(pub, p.recount(size), size, i+1)
	}
}

// compareTallies compares one published result with the recount at size.
func (a *auditor) compareTallies(pub PublishedResults, recount []Tally, size int64, n int) {
	counted := map[string]int64{}
	for _, t := range recount {
		counted[t.CandidateID] = t.Votes
	}
	seen := map[string]bool{}
	for _, t := range pub.Results {
		seen[t.CandidateID] = true
		if t.Votes != counted[t.CandidateID] {
			a.discrepancy(Discrepancy{PollID: pub.PollID, Field: "votes", Detail: fmt.Sprintf(
				"results object %d: candidate %s has %d votes published, %d recounted from the first %d leaves", n, t.CandidateID, t.Votes, counted[t.CandidateID], size)})
		}
	}
	var total int64
	for _, t := range recount {
		total += t.Votes
		if !seen[t.CandidateID] {
			a.discrepancy(Discrepancy{PollID: pub.PollID, Field: "results", Detail: fmt.Sprintf(
				"results object %d: candidate %s is not published, %d votes recounted from the first %d leaves", n, t.CandidateID, t.Votes, size)})
		}
	}
	if pub.Total != total {
		a.discrepancy(Discrepancy{PollID: pub.PollID, Field: "total", Detail: fmt.Sprintf(
			"results object %d: total %d published, %d recounted from the first %d leaves", n, pub.Total, total, size)})
	}
}

// recount is the tally of the first size leaves, by candidate id.
func (p *pollLog) recount(size int64) []Tally {
	counts := make([]int64, len(p.candidates))
	for _, c := range p.votes[:size] {
		counts[c]++
	}
	var out []Tally
	for code, n := range counts {
		if n > 0 {
			out = append(out, Tally{p.candidates[code], n})
		}
	}
	slices.SortFunc(out, func(x, y Tally) int { return strings.Compare(x.CandidateID, y.CandidateID) })
	return out
}

// report is the summary of every poll with what was found.
func (a *auditor) report(checkpoints int) (Report, error) {
	rep := Report{Rows: a.rows, Checkpoints: checkpoints, Discrepancies: a.found}
	for _, id := range a.order {
		p := a.polls[id]
		root, err := p.tree.Root(p.tree.Size())
		if err != nil {
			return Report{}, err
		}
		tallies := p.recount(p.tree.Size())
		if tallies == nil {
			tallies = []Tally{}
		}
		rep.Polls = append(rep.Polls, PollSummary{PollID: id, Leaves: p.tree.Size(), Root: root,
			CheckpointsVerified: p.verified, LargestCheckpoint: p.largest, Tallies: tallies, ResultsCompared: p.compared})
	}
	if rep.Discrepancies == nil {
		rep.Discrepancies = []Discrepancy{}
	}
	return rep, nil
}
