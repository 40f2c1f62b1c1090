package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"tally/audit"
	"tally/vote"
)

// CandidateVotes is one candidate's tally: Votes for every kind (see
// vote/count.go for what it counts), and the figures of its poll's kind,
// nil for the others.
type CandidateVotes struct {
	CandidateID string `json:"candidate_id"`
	Votes       int64  `json:"votes"`
	Yes         *int64 `json:"yes,omitempty"`     // approve
	No          *int64 `json:"no,omitempty"`      // approve
	Abstain     *int64 `json:"abstain,omitempty"` // approve
	Score       *int64 `json:"score,omitempty"`   // score: the sum of its scores
	Borda       *int64 `json:"borda,omitempty"`   // ranked
}

// Results are a poll's tallies from the projection.
type Results struct {
	PollID  string           `json:"poll_id"`
	Kind    vote.Kind        `json:"kind"`
	Results []CandidateVotes `json:"results"`
	Total   int64            `json:"total"`   // the sum of votes
	Ballots int64            `json:"ballots"` // the ballots counted, one per principal (a single choice's: its total)
	// Pairwise (ranked) is Pairwise[a][b], the ballots that rank a above
	// b, for every two choices; CondorcetWinner the choice that beats every
	// other, or nil. Both are absent for the other kinds.
	Pairwise        map[string]map[string]int64 `json:"pairwise,omitempty"`
	CondorcetWinner Winner                      `json:"condorcet_winner,omitzero"`
	// TreeSize is the size of the poll's log these tallies are the count
	// of: its first TreeSize leaves, which a signed checkpoint of that
	// size covers.
	TreeSize int64     `json:"tree_size"`
	AsOf     time.Time `json:"as_of"` // the database's clock when read
}

// resultsSQL reads the tallies and the log's size in one statement, so from
// one snapshot: the projection and the head are written in one transaction,
// and so the size is the very number of leaves the tallies count.
const resultsSQL = `
SELECT c.candidate_id, coalesce(r.vote_count, 0), coalesce(r.yes_count, 0), coalesce(r.no_count, 0),
       coalesce(r.abstain_count, 0), coalesce(r.score_sum, 0), coalesce(r.borda_sum, 0),
       now(), coalesce(h.size, 0), p.ballot_kind, coalesce((SELECT ballots FROM poll_ballots b WHERE b.poll_id = c.poll_id), 0),
       coalesce((SELECT array_agg(w.winner || '>' || w.loser || '>' || w.ballots) FROM poll_pairwise w WHERE w.poll_id = c.poll_id), '{}')
FROM poll_choices c
JOIN polls p ON p.id = c.poll_id
LEFT JOIN poll_results r ON r.poll_id = c.poll_id AND r.candidate_id = c.candidate_id
LEFT JOIN poll_log_heads h ON h.poll_id = c.poll_id
WHERE c.poll_id = $1
ORDER BY c.position`

// Results reads a poll's tallies from the projection, in choice order.
func (s *Store) Results(ctx context.Context, pollID string) (Results, error) {
	rows, err := s.pool.Query(ctx, resultsSQL, pollID)
	if err != nil {
		return Results{}, interpretError("read results", err)
	}
	var (
		choices  []string
		figs     []vote.Figures
		id       string
		f        vote.Figures
		kind     vote.Kind
		ballots  int64
		pairwise []string
		asOf     time.Time
		size     int64
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &f.Votes, &f.Yes, &f.No, &f.Abstain, &f.Score, &f.Borda,
		&asOf, &size, &kind, &ballots, &pairwise}, func() error {
		choices, figs = append(choices, id), append(figs, f)
		return nil
	})
	if err != nil {
		return Results{}, interpretError("read results", err)
	}
	if len(figs) == 0 {
		return Results{}, fmt.Errorf("read results of poll %s: %w", pollID, ErrNotFound)
	}
	c := vote.NewCount(kind, choices)
	copy(c.Figures, figs)
	c.Ballots = ballots
	if kind == vote.KindSingle {
		c.Ballots = c.Total()
	}
	if err := setPairwise(c, pairwise); err != nil {
		return Results{}, fmt.Errorf("read results of poll %s: %w", pollID, err)
	}
	res := ResultsOf(pollID, c)
	res.AsOf, res.TreeSize = asOf, size
	return res, nil
}

// Winner is a ranked poll's Condorcet winner: its id, or "" when no choice
// beats every other; the zero value is a poll of another kind, whose
// results have no such field. In JSON a string, or null.
type Winner struct {
	Ranked bool
	ID     string
}

func (w Winner) IsZero() bool { return !w.Ranked }

func (w Winner) MarshalJSON() ([]byte, error) {
	if w.ID == "" {
		return []byte("null"), nil
	}
	return json.Marshal(w.ID)
}

func (w *Winner) UnmarshalJSON(b []byte) error {
	w.Ranked = true
	if string(b) == "null" {
		w.ID = ""
		return nil
	}
	return json.Unmarshal(b, &w.ID)
}

// setPairwise sets c's pairwise cells from poll_pairwise's rows, each as
// "winner>loser>ballots".
func setPairwise(c *vote.Count, cells []string) error {
	for _, cell := range cells {
		parts := strings.Split(cell, ">")
		if len(parts) != 3 || c.Pairwise == nil {
			return fmt.Errorf("a pairwise cell %q of a poll of kind %s", cell, c.Kind)
		}
		i, j := c.Index(parts[0]), c.Index(parts[1])
		n, err := strconv.ParseInt(parts[2], 10, 64)
		if i < 0 || j < 0 || err != nil {
			continue // a choice the poll no longer has: rebuild reports it
		}
		c.Pairwise[i*len(c.Choices)+j] = n
	}
	return nil
}

// ResultsOf is the results a count makes: every choice's votes, the
// figures of the count's kind, and for ranked the pairwise matrix and the
// Condorcet winner.
func ResultsOf(pollID string, c *vote.Count) Results {
	res := Results{PollID: pollID, Kind: c.Kind, Results: make([]CandidateVotes, len(c.Choices)), Total: c.Total(), Ballots: c.Ballots}
	for i, id := range c.Choices {
		f := c.Figures[i]
		cv := CandidateVotes{CandidateID: id, Votes: f.Votes}
		switch c.Kind {
		case vote.KindApprove:
			cv.Yes, cv.No, cv.Abstain = &f.Yes, &f.No, &f.Abstain
		case vote.KindScore:
			cv.Score = &f.Score
		case vote.KindRanked:
			cv.Borda = &f.Borda
		}
		res.Results[i] = cv
	}
	if c.Kind == vote.KindRanked {
		res.Pairwise = make(map[string]map[string]int64, len(c.Choices))
		for i, a := range c.Choices {
			row := make(map[string]int64, len(c.Choices)-1)
			for j, b := range c.Choices {
				if i != j {
					row[b] = c.Beats(i, j)
				}
			}
			res.Pairwise[a] = row
		}
		res.CondorcetWinner.Ranked = true
		res.CondorcetWinner.ID, _ = c.CondorcetWinner()
	}
	return res
}

// PollTotals reads the total of every poll's tallies, from the projection.
func (s *Store) PollTotals(ctx context.Context) (map[string]int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT poll_id, sum(vote_count)::bigint FROM poll_results GROUP BY poll_id`)
	if err != nil {
		return nil, interpretError("read poll totals", err)
	}
	totals := map[string]int64{}
	var id string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&id, &n}, func() error {
		totals[id] = n
		return nil
	})
	return totals, interpretError("read poll totals", err)
}

// EventRecord is what the ledger knows of one client event id.
type EventRecord struct {
	PrincipalID   string
	ClientEventID string
	PollID        string
	CandidateID   string
	Ballot        string // a ballot of another kind than single, canonical; CandidateID is empty then
	Status        Status // recorded, superseded or rejected
	SupersededBy  string // for superseded: the client event id of the principal's ballot that counts
	Reason        Reason // for rejected
	Seq           int64  // for recorded
	LeafIndex     int64  // for recorded: its leaf in its poll's log (-1: none known)
	ReceivedAt    time.Time
	RecordedAt    time.Time
}

// supersededSQL is the status of a ledger row e: superseded when it is a
// ballot of a poll of answers latest and its principal has a later row in
// the poll (the last by seq counts: ballots.go), with the client event id
// of the last; else recorded.
const supersededSQL = `
SELECT CASE WHEN l.seq <> e.seq THEN 'superseded' ELSE 'recorded' END AS status,
       CASE WHEN l.seq <> e.seq THEN l.client_event_id ELSE '' END AS superseded_by
FROM (SELECT 1) one
LEFT JOIN LATERAL (
    SELECT n.seq, n.client_event_id FROM poll_events n
    WHERE e.latest AND n.latest AND n.poll_id = e.poll_id AND n.principal_id = e.principal_id
    ORDER BY n.seq DESC LIMIT 1) l ON true`

// eventSQL prefers the ledger row: a key_reused rejection can sit beside
// the ledger row of the same key. A row's leaf is found in the
// poll_log_leaves row that holds its seq (-1 for a row in no leaf, which
// rebuild reports).
const eventSQL = `
SELECT poll_id, candidate_id, coalesce(ballot, ''), status, reason, superseded_by, seq, leaf_index, received_at, recorded_at FROM (
    SELECT 1 AS pri, poll_id, candidate_id, ballot, s.status, '' AS reason, s.superseded_by, seq, coalesce((
        SELECT l.first_leaf + array_position(l.seqs, e.seq) - 1 FROM poll_log_leaves l
        WHERE l.poll_id = e.poll_id AND l.max_seq >= e.seq AND l.min_seq <= e.seq AND e.seq = ANY (l.seqs)
        ORDER BY l.max_seq LIMIT 1), -1) AS leaf_index, received_at, recorded_at
    FROM poll_events e CROSS JOIN LATERAL (` + supersededSQL + `) s
    WHERE principal_id = $1 AND client_event_id = $2
    UNION ALL
    SELECT 2, poll_id, candidate_id, ballot, 'rejected', reason, '', 0, -1, received_at, recorded_at
    FROM poll_event_rejections WHERE principal_id = $1 AND client_event_id = $2
) e ORDER BY pri LIMIT 1`

// Event returns the ledger's record of a principal's client event id: the
// ledger row if there is one, otherwise its rejection record, otherwise
// ErrNotFound. The client key is scoped to the principal: another
// principal's key is not found.
func (s *Store) Event(ctx context.Context, principalID, clientEventID string) (EventRecord, error) {
	r := EventRecord{PrincipalID: principalID, ClientEventID: clientEventID}
	err := s.pool.QueryRow(ctx, eventSQL, principalID, clientEventID).
		Scan(&r.PollID, &r.CandidateID, &r.Ballot, &r.Status, &r.Reason, &r.SupersededBy, &r.Seq, &r.LeafIndex, &r.ReceivedAt, &r.RecordedAt)
	if err != nil {
		return EventRecord{}, interpretError("read event", err)
	}
	return r, nil
}

// Leaf is the log leaf of a recorded event: the fields its leaf hash is
// the hash of.
func (r EventRecord) Leaf() audit.Leaf {
	return audit.Leaf{PollID: r.PollID, CandidateID: r.CandidateID, Ballot: r.Ballot, PrincipalID: r.PrincipalID,
		ClientEventID: r.ClientEventID, ReceivedAt: r.ReceivedAt}
}
