package audit

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"tally/vote"
)

// This file owns the audit of an export as a whole: VerifyExport, which
// runs its stages in order (each poll's tree rebuilt from the exported
// rows, every stored checkpoint checked against it, the tallies recounted
// and compared with published results), the state they share, and the
// Report of what they found. Whatever does not hold is a Discrepancy
// naming the poll, the leaves, the line and the field; an error means the
// audit could not be done at all (a file that is not in its format).

// Report is what an audit found. Equal to the export means: every
// checkpoint verified and is a prefix of the export's tree, and every
// published result given equals the recount. Discrepancies lists each
// thing that did not hold.
type Report struct {
	Rows          int64         `json:"rows"`        // export rows read, definitions included
	Definitions   int64         `json:"definitions"` // definition lines among them
	Checkpoints   int           `json:"checkpoints"` // stored checkpoints given
	Polls         []PollSummary `json:"polls"`
	Discrepancies []Discrepancy `json:"discrepancies"`
}

// OK reports whether the audit found nothing wrong.
func (r Report) OK() bool { return len(r.Discrepancies) == 0 }

// UnsignedLeaves are the leaves of every poll that no checkpoint signs.
func (r Report) UnsignedLeaves() int64 {
	var n int64
	for _, p := range r.Polls {
		n += p.UnsignedLeaves
	}
	return n
}

// PollSummary is one poll as the export shows it.
type PollSummary struct {
	PollID              string    `json:"poll_id"`
	Leaves              int64     `json:"leaves"`
	Root                tlog.Hash `json:"root"`                 // of all the export's leaves
	CheckpointsVerified int       `json:"checkpoints_verified"` // signed, and a prefix of the export's tree
	LargestCheckpoint   int64     `json:"largest_checkpoint"`   // size of the largest verified, 0 if none
	// UnsignedLeaves are the leaves past LargestCheckpoint: no checkpoint
	// signs them, so the export alone vouches for them.
	UnsignedLeaves int64 `json:"unsigned_leaves"`
	// VotesWithoutDefinition are the votes before the poll's first
	// definition leaf (all of them in a log that has none): a log from
	// before definitions were logged. No definition checks them.
	VotesWithoutDefinition int64 `json:"votes_without_definition"`
	// Kind is the poll's ballot kind, that of its last definition
	// (single for a log without one).
	Kind vote.Kind `json:"kind"`
	// Ballots are the votes the recount counted (recount.go).
	Ballots int64   `json:"ballots"`
	Tallies []Tally `json:"tallies"` // the recount, by candidate
	// Pairwise and CondorcetWinner are a ranked poll's: the ballots that
	// rank one choice above another, by the two, and the choice that
	// beats every other (null when none does).
	Pairwise        map[string]map[string]int64 `json:"pairwise,omitempty"`
	CondorcetWinner *Winner                     `json:"condorcet_winner,omitempty"`
	ResultsCompared int                         `json:"results_compared"` // published results compared with the recount
	// EligibleChecked: an eligible list was given for the poll and one of
	// its definitions commits it, so its votes were checked against it.
	EligibleChecked bool `json:"eligible_checked"`
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
	return Verify(export, Inputs{Checkpoints: checkpoints, Verifiers: verifiers, Results: results})
}

// Inputs are what an audit checks an export against besides itself.
type Inputs struct {
	Checkpoints []StoredCheckpoint
	Verifiers   []note.Verifier
	// Results, when not nil, are published results to compare with the
	// recount.
	Results []PublishedResults
	// Eligible are the lists of principals of restricted polls: each is
	// checked against its poll's definitions, and the votes against it
	// (verify_eligible.go). A list for a poll the export lacks, or two
	// lists for one poll, is an error.
	Eligible []EligibleList
	// BeforeDefinitions are the polls created before definitions were
	// logged (migration 00011), whose logs may begin with votes. Any other
	// poll's log must begin with its definition: a first leaf that is a
	// vote is a discrepancy (field "definition"), since a definition
	// removed, with checkpoints signed again over what is left, would
	// otherwise leave a log that looks like one from before. A poll named
	// that the export does not hold is an error.
	BeforeDefinitions []string
}

// Verify is VerifyExport with every input an audit takes.
func Verify(export io.Reader, in Inputs) (Report, error) {
	checkpoints, verifiers, results := in.Checkpoints, in.Verifiers, in.Results
	if len(verifiers) == 0 && len(checkpoints) > 0 {
		return Report{}, errors.New("audit: no verifier key to check the checkpoints with")
	}
	a := &auditor{polls: map[string]*pollLog{}, seqs: map[int64]int{}, keys: map[eventKey]int{}, before: map[string]bool{}}
	if err := a.useEligible(in.Eligible); err != nil {
		return Report{}, err
	}
	for _, id := range in.BeforeDefinitions {
		if !vote.ValidID(id) {
			return Report{}, fmt.Errorf("audit: %q is not a poll id (%s), so it names no poll from before definitions", id, vote.IDRule)
		}
		a.before[id] = true
	}
	if err := a.readExport(export); err != nil {
		return Report{}, err
	}
	for _, id := range in.BeforeDefinitions {
		if a.polls[id] == nil {
			return Report{}, fmt.Errorf("audit: poll %s is named as from before definitions, but the export does not hold it; check the poll id", id)
		}
	}
	if err := a.checkEligibleUsed(in.Eligible); err != nil {
		return Report{}, err
	}
	a.checkCheckpoints(checkpoints, verifiers)
	if err := a.compareResults(results); err != nil {
		return Report{}, err
	}
	return a.report(len(checkpoints))
}

// auditor holds the polls an export rebuilt and what was found so far.
type auditor struct {
	polls       map[string]*pollLog
	order       []string // poll ids in order of first appearance
	rows        int64
	definitions int64
	seqs        map[int64]int // the export line of each seq
	// keys are the export line of each (principal, event id), across
	// polls: the ledger holds one row per pair.
	keys  map[eventKey]int
	found []Discrepancy
	// eligible are the lists given, by poll (verify_eligible.go).
	eligible map[string]*eligibility
	// before are the polls from before definitions (Inputs).
	before map[string]bool
}

// pollLog is one poll of the export: its tree and, per leaf, what the
// recount needs of it (recount.go), so that a recount at any size is
// cheap.
type pollLog struct {
	tree       Tree
	candidates []string          // by code: every candidate and choice id seen
	codes      map[string]uint32 // candidate id to code
	leaves     []leafVote        // per leaf
	ballots    [][]ballotItem    // the counted ballots' items, their choices as codes
	defs       []*Definition     // every definition read, in leaf order
	defLeaves  []int64           // the leaf of each
	defCodes   [][]uint32        // the codes of each one's choices
	def        *Definition       // in force: the last definition read
	defLeaf    int64             // def's leaf
	// undefined is the number of votes before the poll's first
	// definition: a log from before definitions were logged.
	undefined int64
	voters    map[string]uint32 // principal id to code
	firstLeaf []int64           // by principal code: its first vote's leaf
	eligible  *eligibility      // the list given for the poll, if any
	verified  int
	largest   int64
	compared  int
}

func (a *auditor) poll(id string) *pollLog {
	p, ok := a.polls[id]
	if !ok {
		p = &pollLog{codes: map[string]uint32{}, voters: map[string]uint32{}, eligible: a.eligible[id]}
		a.polls[id] = p
		a.order = append(a.order, id)
	}
	return p
}

func (a *auditor) discrepancy(d Discrepancy) { a.found = append(a.found, d) }

// report is the summary of every poll with what was found.
func (a *auditor) report(checkpoints int) (Report, error) {
	rep := Report{Rows: a.rows, Definitions: a.definitions, Checkpoints: checkpoints, Discrepancies: a.found}
	for _, id := range a.order {
		p := a.polls[id]
		root, err := p.tree.Root(p.tree.Size())
		if err != nil {
			return Report{}, err
		}
		c := p.recount(p.tree.Size())
		if c.tallies == nil {
			c.tallies = []Tally{}
		}
		rep.Polls = append(rep.Polls, PollSummary{PollID: id, Leaves: p.tree.Size(), Root: root,
			CheckpointsVerified: p.verified, LargestCheckpoint: p.largest, UnsignedLeaves: p.tree.Size() - p.largest,
			VotesWithoutDefinition: p.votesWithoutDefinition(), Kind: c.kind, Ballots: c.ballots, Tallies: c.tallies,
			Pairwise: c.pairwise, CondorcetWinner: c.condorcet, ResultsCompared: p.compared,
			EligibleChecked: p.eligible != nil && p.eligible.checked})
	}
	if rep.Discrepancies == nil {
		rep.Discrepancies = []Discrepancy{}
	}
	return rep, nil
}

func (p *pollLog) votesWithoutDefinition() int64 {
	if p.def == nil {
		return p.tree.Size()
	}
	return p.undefined
}

// VotesWithoutDefinition are the votes of every poll that no definition
// covers.
func (r Report) VotesWithoutDefinition() int64 {
	var n int64
	for _, p := range r.Polls {
		n += p.VotesWithoutDefinition
	}
	return n
}
