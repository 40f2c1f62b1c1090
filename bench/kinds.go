package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"tally/ledger"
	"tally/vote"
)

// This file owns the synthetic loads of ballots (a kind's polls, the
// ballots cycled over them, and for answers latest the principals'
// changes), the projector draining a backlog of each (P-multiple,
// P-score, P-ranked, P-latest) and the check of the projection it leaves
// against the count of the ballots the load holds.

// load is a synthetic load over polls of benchChoices: the polls' rules
// and the ballots their events cycle through, in canonical form.
type load struct {
	name    string // the row's suffix: P-<name>
	what    string // the ballots in words, for the table
	rules   vote.Rules
	ballots []string
	// changes: 30% of the events are a principal's second or third
	// ballot (changeOf), the rest first ballots.
	changes bool
}

// singleLoad is syntheticEvent's: a first single choice of each principal.
var singleLoad = load{name: "single", rules: vote.Single, ballots: benchChoices}

// kindLoads are the loads of P-multiple, P-score, P-ranked and P-latest.
// P-latest is single choice, so that against P it measures what answers
// latest adds (the principal locked, its last ballot read, its old
// ballot's figures taken out) and nothing of a kind.
var kindLoads = []load{
	{name: "multiple", what: "multiple (max_choices 2), each ballot 1 or 2 choices", rules: mustRules(vote.Spec{Kind: "multiple", MaxChoices: ptr(2)}),
		ballots: []string{`["a"]`, `["a","b"]`, `["b"]`, `["b","c"]`, `["c"]`, `["c","d"]`, `["d"]`, `["a","d"]`, `["a","c"]`, `["b","d"]`}},
	{name: "score", what: "score (max_score 5), each ballot scoring the 4 choices", rules: mustRules(vote.Spec{Kind: "score", MaxScore: ptr(5)}),
		ballots: scoreBallots(5)},
	{name: "ranked", what: "ranked, each ballot ranking the 4 choices", rules: mustRules(vote.Spec{Kind: "ranked"}),
		ballots: rankings(benchChoices)},
	{name: "latest", what: "single choice of answers latest, 30% of the ballots a principal's second or third", rules: mustRules(vote.Spec{Answers: "latest"}),
		ballots: benchChoices, changes: true},
}

// rankedLoad is the ranked rebuild's (RK), latestLoad the rebuild's of
// answers latest (RL).
var rankedLoad, latestLoad = kindLoads[2], kindLoads[3]

func mustRules(spec vote.Spec) vote.Rules {
	r, err := vote.NewRules(spec, len(benchChoices))
	if err != nil {
		panic(err)
	}
	return r
}

func ptr(n int) *int { return &n }

// scoreBallots are ballots scoring every choice of benchChoices from 0 to
// max, in as many patterns as there are scores.
func scoreBallots(max int) []string {
	var out []string
	for k := range max + 1 {
		b := vote.Ballot{Kind: vote.KindScore}
		for j, c := range benchChoices {
			b.Marks = append(b.Marks, vote.Mark{Choice: c, Value: (k + j) % (max + 1)})
		}
		out = append(out, b.Canonical())
	}
	return out
}

// rankings are every order of choices, as ranked ballots.
func rankings(choices []string) []string {
	if len(choices) <= 1 {
		return []string{vote.Ballot{Kind: vote.KindRanked, Choices: choices}.Canonical()}
	}
	var out []string
	for i, first := range choices {
		rest := append(append([]string{}, choices[:i]...), choices[i+1:]...)
		for _, r := range rankings(rest) {
			out = append(out, `["`+first+`",`+r[1:])
		}
	}
	return out
}

// changeLag is how many blocks of 10 events a principal's second ballot
// follows its first by: 3,000 events, more than the batches in flight, so
// that most changes replace a ballot an earlier transaction recorded.
const changeLag = 300

// changeOf says whose ballot event i of a load with changes is, and the
// how-manieth of its principal: in each block b of 10 events, the first 7
// are the first ballots of principals 7b to 7b+6; then the second ballots
// of principals 7c and 7c+1 and the third of 7c, c being changeLag blocks
// before b. The first changeLag blocks, which have none before them,
// change their own principals 7b+2 and 7b+3 instead.
func changeOf(i int) (principal, nth int) {
	b, s := i/10, i%10
	if s < 7 {
		return 7*b + s, 1
	}
	p := 7*b + 2
	if b >= changeLag {
		p = 7 * (b - changeLag)
	}
	switch s {
	case 7:
		return p, 2
	case 8:
		return p + 1, 2
	}
	return p, 3
}

// principalOf is event i's principal and which of its ballots it is.
func (l load) principalOf(i int) (principal, nth int) {
	if l.changes {
		return changeOf(i)
	}
	return i, 1
}

// principals is how many principals events 0..n-1 of l come from: the
// ballots that count, one a principal.
func (l load) principals(n int) int {
	if !l.changes {
		return n
	}
	seen, k := make([]bool, n), 0 // every principal id is below n
	for i := range n {
		if p, _ := changeOf(i); !seen[p] {
			seen[p], k = true, k+1
		}
	}
	return k
}

// event is event i of l over polls: principal u<p>'s nth ballot, key
// k<nth>, in poll p mod polls; a single-choice load's event i without
// changes is syntheticEvent(i).
func (l load) event(i, polls int, now time.Time) ledger.Event {
	p, nth := l.principalOf(i)
	key := "k1"
	if nth > 1 {
		key = "k" + strconv.Itoa(nth)
	}
	ev := ledger.Event{PrincipalID: "u" + strconv.Itoa(p), ClientEventID: key, PollID: pollID(p % polls), ReceivedAt: now}
	b := l.ballots[(p/polls+nth-1)%len(l.ballots)]
	if l.rules.Kind == vote.KindSingle {
		ev.CandidateID = b
	} else {
		ev.Ballot = b
	}
	return ev
}

// ballotJSON is principal p's nth ballot in a poll of l as a vote's
// "ballot" spells it: its canonical form, which is JSON, or a single
// choice as a JSON string.
func (l load) ballotJSON(p, nth int) string {
	b := l.ballots[(p+nth-1)%len(l.ballots)]
	if l.rules.Kind == vote.KindSingle {
		return strconv.Quote(b)
	}
	return b
}

// want is each poll's count of the ballots that count among events
// 0..n-1 of l: every one, or with changes each principal's last.
func (l load) want(n, polls int) (map[string]*vote.Count, error) {
	parsed := make([]vote.Ballot, len(l.ballots))
	for j, s := range l.ballots {
		b, err := vote.ParseCanonical(l.rules.Kind, s)
		if err != nil {
			return nil, fmt.Errorf("load %s: ballot %s: %w", l.name, s, err)
		}
		parsed[j] = b
	}
	counts := map[string]*vote.Count{}
	add := func(p, nth int) {
		poll := pollID(p % polls)
		c := counts[poll]
		if c == nil {
			c = vote.NewCount(l.rules.Kind, benchChoices)
			counts[poll] = c
		}
		c.Add(parsed[(p/polls+nth-1)%len(l.ballots)], 1)
	}
	if !l.changes {
		for i := range n {
			add(i, 1)
		}
		return counts, nil
	}
	last := make([]int, n) // by principal (every principal id is below n): its last ballot, 0 for none
	for i := range n {
		p, nth := changeOf(i)
		last[p] = nth
	}
	for p, nth := range last {
		if nth > 0 {
			add(p, nth)
		}
	}
	return counts, nil
}

// createLoadPolls adds polls poll0..poll(n-1) of l's rules, open to
// anyone, with choices a-d.
func createLoadPolls(ctx context.Context, pool *pgxpool.Pool, n int, l load) error {
	store, err := ledger.New(pool, ledger.Config{})
	if err != nil {
		return err
	}
	for i := range n {
		if err := store.CreatePoll(ctx, ledger.Poll{ID: pollID(i), Title: "bench", OpensAt: time.Unix(0, 0), Choices: benchChoices, Rules: l.rules}); err != nil {
			return err
		}
	}
	return nil
}

// checkFigures compares the projection's figures of every poll in want
// (votes, scores, Borda sums, pairwise cells and ballots) with want.
func checkFigures(ctx context.Context, pool *pgxpool.Pool, want map[string]*vote.Count) error {
	got := map[string]*vote.Count{}
	for poll, w := range want {
		got[poll] = vote.NewCount(w.Kind, w.Choices)
	}
	var (
		poll, cand, loser string
		f                 vote.Figures
		n                 int64
	)
	rows, err := pool.Query(ctx, `SELECT poll_id, candidate_id, vote_count, score_sum, borda_sum FROM poll_results`)
	if err != nil {
		return err
	}
	if _, err := pgx.ForEachRow(rows, []any{&poll, &cand, &f.Votes, &f.Score, &f.Borda}, func() error {
		if c := got[poll]; c != nil && c.Index(cand) >= 0 {
			c.Figures[c.Index(cand)] = f
		}
		return nil
	}); err != nil {
		return err
	}
	rows, err = pool.Query(ctx, `SELECT poll_id, winner, loser, ballots FROM poll_pairwise`)
	if err != nil {
		return err
	}
	if _, err := pgx.ForEachRow(rows, []any{&poll, &cand, &loser, &n}, func() error {
		if c := got[poll]; c != nil && c.Pairwise != nil && c.Index(cand) >= 0 && c.Index(loser) >= 0 {
			c.Pairwise[c.Index(cand)*len(c.Choices)+c.Index(loser)] = n
		}
		return nil
	}); err != nil {
		return err
	}
	rows, err = pool.Query(ctx, `SELECT poll_id, ballots FROM poll_ballots`)
	if err != nil {
		return err
	}
	if _, err := pgx.ForEachRow(rows, []any{&poll, &n}, func() error {
		if c := got[poll]; c != nil {
			c.Ballots = n
		}
		return nil
	}); err != nil {
		return err
	}
	for poll, w := range want {
		g := got[poll]
		if g.Ballots != w.Ballots {
			return fmt.Errorf("poll %s counts %d ballots, the load %d", poll, g.Ballots, w.Ballots)
		}
		for i, wf := range w.Figures {
			gf := g.Figures[i]
			if gf.Votes != wf.Votes || gf.Score != wf.Score || gf.Borda != wf.Borda {
				return fmt.Errorf("poll %s choice %s: votes %d, score %d, Borda %d; the load's %d, %d, %d",
					poll, w.Choices[i], gf.Votes, gf.Score, gf.Borda, wf.Votes, wf.Score, wf.Borda)
			}
		}
		for k, v := range w.Pairwise {
			if g.Pairwise[k] != v {
				return fmt.Errorf("poll %s: %d ballots rank %s above %s, the load %d", poll, g.Pairwise[k], w.Choices[k/len(w.Choices)], w.Choices[k%len(w.Choices)], v)
			}
		}
	}
	return nil
}

// measureKinds: P-multiple, P-score, P-ranked and P-latest, each as P with
// its load, and P itself when the run has not measured it.
func measureKinds(ctx context.Context, e *env, sz sizes, t *table) error {
	if _, ok := t.get("P"); !ok {
		if _, err := measureP(ctx, e, sz, t); err != nil {
			return err
		}
	}
	for _, l := range kindLoads {
		e.settle(ctx)
		load := loadAvg()
		r, err := e.drainLoad(ctx, l, e.tally, "proj"+l.name, sz.kinds, sz.projectorLimit)
		if err != nil {
			return fmt.Errorf("row P-%s: %w", l.name, err)
		}
		if r.events < sz.kinds {
			return fmt.Errorf("the projector applied %d of %d ballots (%s) within %s", r.events, sz.kinds, l.name, sz.projectorLimit)
		}
		t.add(fig{id: "P-" + l.name, what: fmt.Sprintf("projector as P: %s preloaded ballots drained, %s", count(sz.kinds), l.what),
			value: r.rate(), unit: "events/s", load: load, command: r.command, extra: r.cpu() + "; " + r.wal()})
	}
	return nil
}
