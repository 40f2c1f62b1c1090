package ledger_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"tally/ledger"
	"tally/vote"
)

// ballotPoll creates a poll of rules r with n choices c0..c(n-1).
func (b bundle) ballotPoll(t *testing.T, id string, spec vote.Spec, n int) ledger.Poll {
	t.Helper()
	p := ledger.Poll{ID: id, Title: "poll " + id, OpensAt: time.Unix(0, 0)}
	for i := range n {
		p.Choices = append(p.Choices, fmt.Sprintf("c%d", i))
	}
	r, err := vote.NewRules(spec, n)
	if err != nil {
		t.Fatalf("rules %+v: %v", spec, err)
	}
	p.Rules = r
	if err := b.store.CreatePoll(b.ctx, p); err != nil {
		t.Fatalf("create poll %s: %v", id, err)
	}
	return p
}

func ballotEv(principal, key, poll, ballot string) ledger.Event {
	return ledger.Event{PrincipalID: principal, ClientEventID: key, PollID: poll, Ballot: ballot, ReceivedAt: time.Now()}
}

func intp(v int) *int { return &v }

func jsonOf(t interface{ Fatal(...any) }, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// drawBallot draws a ballot of p's kind, valid or not, in canonical form.
func drawBallot(t *rapid.T, p ledger.Poll) vote.Ballot {
	r := p.Rules
	b := vote.Ballot{Kind: r.Kind}
	ids := rapid.SliceOfNDistinct(rapid.SampledFrom(append(slices.Clone(p.Choices), "nope")), 0, len(p.Choices), rapid.ID[string]).Draw(t, "ids")
	switch r.Kind {
	case vote.KindMultiple, vote.KindRanked:
		b.Choices = ids
	case vote.KindApprove:
		for _, id := range ids {
			b.Marks = append(b.Marks, vote.Mark{Choice: id, Value: rapid.IntRange(0, 2).Draw(t, "mark")})
		}
	case vote.KindScore:
		for _, id := range ids {
			b.Marks = append(b.Marks, vote.Mark{Choice: id, Value: rapid.IntRange(0, r.MaxScore+1).Draw(t, "score")})
		}
	}
	// Canonical of a ballot not in canonical order is still its JSON;
	// ParseBallot puts it in order.
	again, err := vote.ParseBallot(r.Kind, []byte(b.Canonical()))
	if err != nil {
		t.Fatalf("a drawn ballot does not parse: %v", err)
	}
	return again
}

// For every kind, random ballots (valid or not, with retries and second
// answers of a principal): Append records exactly the valid first ballot
// of each principal (final), the results equal vote.Count of those
// ballots, rebuild finds the projection equal to the ledger and every log
// its rows, and a projection changed behind the ledger's back is found
// and repaired.
func TestBallotsProjectionIsTheCount(t *testing.T) {
	t.Parallel()
	b := setup(t)
	specs := map[vote.Kind]vote.Spec{
		vote.KindMultiple: {Kind: "multiple", MinChoices: intp(0), MaxChoices: intp(2)},
		vote.KindApprove:  {Kind: "approve"},
		vote.KindScore:    {Kind: "score", MaxScore: intp(5), Budget: intp(8)},
		vote.KindRanked:   {Kind: "ranked"},
	}
	polls := map[vote.Kind]ledger.Poll{}
	for k, spec := range specs {
		polls[k] = b.ballotPoll(t, string(k), spec, 4)
	}
	models := map[vote.Kind]*vote.Count{}
	for k, p := range polls {
		models[k] = vote.NewCount(k, p.Choices)
	}
	answered := map[string]bool{}
	n := 0
	rapid.Check(t, func(rt *rapid.T) {
		kind := rapid.SampledFrom([]vote.Kind{vote.KindMultiple, vote.KindApprove, vote.KindScore, vote.KindRanked}).Draw(rt, "kind")
		p := polls[kind]
		var batch []ledger.Event
		var ballots []vote.Ballot
		for range rapid.IntRange(1, 8).Draw(rt, "size") {
			n++
			principal := fmt.Sprintf("u%d", rapid.IntRange(0, n).Draw(rt, "principal"))
			bal := drawBallot(rt, p)
			batch = append(batch, ballotEv(principal, fmt.Sprintf("k%d", n), p.ID, bal.Canonical()))
			ballots = append(ballots, bal)
		}
		outs, err := b.store.Append(b.ctx, batch)
		if err != nil {
			rt.Fatal(err)
		}
		for i, o := range outs {
			valid := p.Rules.Check(p.Choices, ballots[i]) == nil
			key := p.ID + "/" + batch[i].PrincipalID
			var want ledger.Outcome
			switch {
			case !valid:
				want = ledger.Outcome{Status: ledger.StatusRejected, Reason: ledger.ReasonInvalidBallot}
			case answered[key]:
				want = ledger.Outcome{Status: ledger.StatusRejected, Reason: ledger.ReasonAlreadyResponded}
			default:
				want = ledger.Outcome{Status: ledger.StatusRecorded}
				answered[key] = true
				models[kind].Add(ballots[i], 1)
			}
			if o.Status != want.Status || o.Reason != want.Reason {
				rt.Fatalf("event %d (%s by %s): %v, want %v", i, batch[i].Ballot, batch[i].PrincipalID, o, want)
			}
		}
		// A retry of the whole batch changes nothing.
		again, err := b.store.Append(b.ctx, batch)
		if err != nil {
			rt.Fatal(err)
		}
		for i, o := range again {
			if outs[i].Status == ledger.StatusRecorded && o.Status != ledger.StatusDuplicate {
				rt.Fatalf("retry of event %d: %v, want duplicate", i, o)
			}
		}
		res, err := b.store.Results(b.ctx, p.ID)
		if err != nil {
			rt.Fatal(err)
		}
		want := ledger.ResultsOf(p.ID, models[kind])
		want.AsOf, want.TreeSize = res.AsOf, res.TreeSize
		if got, want := jsonOf(rt, res), jsonOf(rt, want); got != want {
			rt.Fatalf("results of %s\n got %s\nwant %s", p.ID, got, want)
		}
	})
	checkInvariants(t, b)

	// Drift in each table of figures is found, and repaired.
	if _, err := b.db.Pool.Exec(b.ctx, `
UPDATE poll_results SET borda_sum = borda_sum + 3 WHERE poll_id = 'ranked' AND candidate_id = 'c1';
INSERT INTO poll_pairwise VALUES ('ranked', 'c2', 'c3', 1000) ON CONFLICT (poll_id, winner, loser) DO UPDATE SET ballots = 1000;
UPDATE poll_ballots SET ballots = ballots + 1 WHERE poll_id = 'multiple';
UPDATE poll_results SET yes_count = yes_count + 2 WHERE poll_id = 'approve' AND candidate_id = 'c0'`); err != nil {
		t.Fatal(err)
	}
	rep, err := b.store.Rebuild(b.ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, d := range rep.Diffs() {
		found = append(found, d.PollID+"/"+d.CandidateID+"/"+d.Figure)
	}
	slices.Sort(found)
	if fmt.Sprint(found) != "[approve/c0/yes multiple//ballots ranked/c1/borda ranked/c2/above:c3]" {
		t.Fatalf("rebuild found %v", found)
	}
	changed, err := b.store.Repair(b.ctx, "")
	if err != nil || len(changed) != 4 {
		t.Fatalf("repair changed %+v (%v), want the 4 figures", changed, err)
	}
	checkInvariants(t, b)
	for k, p := range polls {
		res, err := b.store.Results(b.ctx, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := ledger.ResultsOf(p.ID, models[k])
		want.AsOf, want.TreeSize = res.AsOf, res.TreeSize
		if got, want := jsonOf(t, res), jsonOf(t, want); got != want {
			t.Fatalf("results of %s after repair\n got %s\nwant %s", p.ID, got, want)
		}
	}
}

// A single choice in a poll of another kind, and a ballot in a poll of
// kind single, are rejected invalid_choice and invalid_ballot: neither
// kind's rule lets the other through.
func TestBallotOfTheWrongKind(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll(t, "single", "a", "b")
	b.ballotPoll(t, "multi", vote.Spec{Kind: "multiple"}, 2)
	outs, err := b.store.Append(b.ctx, []ledger.Event{
		ev("u1", "k1", "multi", "c0"),
		ballotEv("u2", "k2", "single", `["a"]`),
		ballotEv("u3", "k3", "multi", `["c0","c1"]`),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []ledger.Outcome{
		{Status: ledger.StatusRejected, Reason: ledger.ReasonInvalidChoice},
		{Status: ledger.StatusRejected, Reason: ledger.ReasonInvalidBallot},
		{Status: ledger.StatusRecorded, Seq: outs[2].Seq},
	}
	if !slices.Equal(outs, want) {
		t.Fatalf("outcomes %v, want %v", outs, want)
	}
	checkInvariants(t, b)
}

// In polls of answers latest, of every kind: random ballots of a few
// principals, several of one principal in a batch too (whose seqs are not
// in batch order: the insert orders by key). Each valid ballot is
// recorded, the one that counts is the principal's last in batch order,
// the results are vote.Count of those, each earlier ballot reads as
// superseded by the last, a retry changes nothing, and rebuild (which
// finds the last in log order) agrees.
func TestLatestBallotsReplace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	specs := map[vote.Kind]vote.Spec{
		vote.KindSingle:   {Answers: "latest"},
		vote.KindMultiple: {Kind: "multiple", MinChoices: intp(0), MaxChoices: intp(2), Answers: "latest"},
		vote.KindApprove:  {Kind: "approve", Answers: "latest"},
		vote.KindScore:    {Kind: "score", MaxScore: intp(5), Budget: intp(8), Answers: "latest"},
		vote.KindRanked:   {Kind: "ranked", Answers: "latest"},
	}
	polls := map[vote.Kind]ledger.Poll{}
	for k, spec := range specs {
		polls[k] = b.ballotPoll(t, "l"+string(k), spec, 4)
	}
	type counted struct {
		key    string
		ballot vote.Ballot
	}
	last := map[string]counted{} // poll/principal -> the ballot that counts
	var keys []ledger.EventKey   // every recorded ballot
	n := 0
	rapid.Check(t, func(rt *rapid.T) {
		kind := rapid.SampledFrom(vote.Kinds).Draw(rt, "kind")
		p := polls[kind]
		var batch []ledger.Event
		var ballots []vote.Ballot
		for range rapid.IntRange(1, 6).Draw(rt, "size") {
			n++
			principal := fmt.Sprintf("u%d", rapid.IntRange(0, 3).Draw(rt, "principal"))
			var bal vote.Ballot
			if kind == vote.KindSingle {
				bal = vote.Ballot{Kind: vote.KindSingle, Choices: []string{rapid.SampledFrom(p.Choices).Draw(rt, "choice")}}
			} else {
				bal = drawBallot(rt, p)
			}
			// Keys that sort against batch order: the insert orders by key.
			e := ledger.EventOf(principal, fmt.Sprintf("k%06d", 1_000_000-n), p.ID, bal.Canonical(), time.Now())
			batch = append(batch, e)
			ballots = append(ballots, bal)
		}
		outs, err := b.store.Append(b.ctx, batch)
		if err != nil {
			rt.Fatal(err)
		}
		for i, o := range outs {
			valid := p.Rules.Check(p.Choices, ballots[i]) == nil
			want := ledger.Outcome{Status: ledger.StatusRecorded}
			if !valid {
				want = ledger.Outcome{Status: ledger.StatusRejected, Reason: ledger.ReasonInvalidBallot}
			} else {
				last[p.ID+"/"+batch[i].PrincipalID] = counted{batch[i].ClientEventID, ballots[i]}
				keys = append(keys, ledger.EventKey{PrincipalID: batch[i].PrincipalID, ClientEventID: batch[i].ClientEventID})
			}
			if o.Status != want.Status || o.Reason != want.Reason {
				rt.Fatalf("event %d (%s by %s): %v, want %v", i, batch[i].Answer(), batch[i].PrincipalID, o, want)
			}
		}
		if again, err := b.store.Append(b.ctx, batch); err != nil {
			rt.Fatal(err)
		} else {
			for i, o := range again {
				if outs[i].Status == ledger.StatusRecorded && o.Status != ledger.StatusDuplicate {
					rt.Fatalf("retry of event %d: %v, want duplicate", i, o)
				}
			}
		}
		model := vote.NewCount(kind, p.Choices)
		for k, c := range last {
			if strings.HasPrefix(k, p.ID+"/") {
				model.Add(c.ballot, 1)
			}
		}
		res, err := b.store.Results(b.ctx, p.ID)
		if err != nil {
			rt.Fatal(err)
		}
		want := ledger.ResultsOf(p.ID, model)
		want.AsOf, want.TreeSize = res.AsOf, res.TreeSize
		if got, want := jsonOf(rt, res), jsonOf(rt, want); got != want {
			rt.Fatalf("results of %s\n got %s\nwant %s", p.ID, got, want)
		}
	})
	recs, err := b.store.Events(b.ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		r := recs[k]
		c := last[r.PollID+"/"+k.PrincipalID]
		wantStatus, wantBy := ledger.StatusSuperseded, c.key
		if c.key == k.ClientEventID {
			wantStatus, wantBy = ledger.StatusRecorded, ""
		}
		if r.Status != wantStatus || r.SupersededBy != wantBy {
			t.Fatalf("event %s of %s: %s by %q, want %s by %q", k.ClientEventID, k.PrincipalID, r.Status, r.SupersededBy, wantStatus, wantBy)
		}
		if one, err := b.store.Event(b.ctx, k.PrincipalID, k.ClientEventID); err != nil || one.Status != r.Status || one.SupersededBy != r.SupersededBy {
			t.Fatalf("Event(%v) = %+v, %v; Events said %+v", k, one, err, r)
		}
	}
	checkInvariants(t, b)
}
