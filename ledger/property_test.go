package ledger_test

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"tally/ledger"
)

// model is a small in-memory statement of the ledger's rules, written
// without looking at how Append implements them.
type model struct {
	ledger    map[[2]string]modelRow    // (principal, key) -> row
	answered  map[[2]string]bool        // (poll, principal)
	rejected  map[[2]string]modelReject // (principal, key) -> first rejection
	tallies   map[[2]string]int64       // (poll, candidate)
	polls     map[string]modelPoll
	ledgerLen int
}

type modelRow struct {
	poll, cand string
	seq        int64
}

type modelReject struct {
	poll, cand string
	reason     ledger.Reason
}

type modelPoll struct {
	choices  map[string]bool
	opensAt  time.Time
	closesAt *time.Time
	eligible map[string]bool // nil: any
}

func (m *model) apply(e ledger.Event) ledger.Outcome {
	pk := [2]string{e.PrincipalID, e.ClientEventID}
	if row, ok := m.ledger[pk]; ok {
		if row.poll == e.PollID && row.cand == e.CandidateID {
			return ledger.Outcome{Status: ledger.StatusDuplicate, Seq: row.seq}
		}
		if _, ok := m.rejected[pk]; !ok {
			m.rejected[pk] = modelReject{e.PollID, e.CandidateID, ledger.ReasonKeyReused}
		}
		return ledger.Outcome{Status: ledger.StatusRejected, Reason: ledger.ReasonKeyReused}
	}
	if r, ok := m.rejected[pk]; ok {
		if r.poll == e.PollID && r.cand == e.CandidateID {
			return ledger.Outcome{Status: ledger.StatusRejected, Reason: r.reason}
		}
		return ledger.Outcome{Status: ledger.StatusRejected, Reason: ledger.ReasonKeyReused}
	}
	reject := func(reason ledger.Reason) ledger.Outcome {
		m.rejected[pk] = modelReject{e.PollID, e.CandidateID, reason}
		return ledger.Outcome{Status: ledger.StatusRejected, Reason: reason}
	}
	p, ok := m.polls[e.PollID]
	switch {
	case !ok:
		return reject(ledger.ReasonUnknownPoll)
	case e.ReceivedAt.Before(p.opensAt), p.closesAt != nil && !e.ReceivedAt.Before(*p.closesAt):
		return reject(ledger.ReasonPollClosed)
	case !p.choices[e.CandidateID]:
		return reject(ledger.ReasonInvalidChoice)
	case p.eligible != nil && !p.eligible[e.PrincipalID]:
		return reject(ledger.ReasonNotEligible)
	case m.answered[[2]string{e.PollID, e.PrincipalID}]:
		return reject(ledger.ReasonAlreadyResponded)
	}
	m.ledger[pk] = modelRow{poll: e.PollID, cand: e.CandidateID} // seq filled in by the caller
	m.answered[[2]string{e.PollID, e.PrincipalID}] = true
	m.tallies[[2]string{e.PollID, e.CandidateID}]++
	m.ledgerLen++
	return ledger.Outcome{Status: ledger.StatusRecorded}
}

// TestAppendMatchesModel drives Append with random batches drawn from a
// small space, so that exact retries, reused keys, second responses, closed
// polls, unknown candidates and repeats inside one batch are common, and
// compares every outcome and the final tallies with the model. It runs
// with Append's optimistic step and without it: both must follow the model.
func TestAppendMatchesModel(t *testing.T) {
	t.Parallel()
	t.Run("optimistic", func(t *testing.T) { t.Parallel(); checkAppendMatchesModel(t, setup(t)) })
	t.Run("full-rules-only", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ledger.FullPathOnly(b.store)
		checkAppendMatchesModel(t, b)
	})
}

func checkAppendMatchesModel(t *testing.T, b bundle) {
	closesAt := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	run := 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		ns := fmt.Sprintf("r%d-", run) // each run its own polls and principals
		m := &model{ledger: map[[2]string]modelRow{}, answered: map[[2]string]bool{},
			rejected: map[[2]string]modelReject{}, tallies: map[[2]string]int64{}, polls: map[string]modelPoll{}}
		create := func(id string, choices []string, opens time.Time, closes *time.Time, eligible []string) {
			if err := b.store.CreatePoll(b.ctx, ledger.Poll{ID: ns + id, Title: id, OpensAt: opens,
				ClosesAt: closes, Choices: choices, Eligible: eligible}); err != nil {
				rt.Fatalf("create poll: %v", err)
			}
			mp := modelPoll{choices: map[string]bool{}, opensAt: opens, closesAt: closes}
			for _, c := range choices {
				mp.choices[c] = true
			}
			if eligible != nil {
				mp.eligible = map[string]bool{}
				for _, e := range eligible {
					mp.eligible[e] = true
				}
			}
			m.polls[ns+id] = mp
		}
		epoch := time.Unix(0, 0)
		create("open", []string{"a", "b", "c"}, epoch, nil, nil)
		create("listed", []string{"a", "b"}, epoch, nil, []string{ns + "u0", ns + "u1"})
		create("closing", []string{"a", "b"}, epoch, &closesAt, nil)
		create("later", []string{"a", "c"}, closesAt, nil, nil) // opens when "closing" closes

		genEvent := rapid.Custom(func(t *rapid.T) ledger.Event {
			received := closesAt.Add(-time.Minute)
			if rapid.Bool().Draw(t, "late") {
				received = closesAt.Add(time.Minute)
			}
			return ledger.Event{
				PrincipalID:   ns + rapid.SampledFrom([]string{"u0", "u1", "u2", "u3"}).Draw(t, "principal"),
				ClientEventID: rapid.SampledFrom([]string{"k0", "k1", "k2"}).Draw(t, "key"),
				PollID:        ns + rapid.SampledFrom([]string{"open", "listed", "closing", "later", "ghost"}).Draw(t, "poll"),
				CandidateID:   rapid.SampledFrom([]string{"a", "b", "c", "z"}).Draw(t, "candidate"),
				ReceivedAt:    received,
			}
		})
		var last []ledger.Event
		steps := rapid.IntRange(1, 8).Draw(rt, "steps")
		for step := 0; step < steps; step++ {
			batch := rapid.SliceOfN(genEvent, 1, 12).Draw(rt, "batch")
			if last != nil && rapid.IntRange(0, 3).Draw(rt, "retry") == 0 {
				batch = last // the retry after an uncertain commit
			}
			got, err := b.store.Append(b.ctx, batch)
			if err != nil {
				rt.Fatalf("append: %v", err)
			}
			for i, e := range batch {
				want := m.apply(e)
				if want.Status == ledger.StatusRecorded {
					pk := [2]string{e.PrincipalID, e.ClientEventID}
					row := m.ledger[pk]
					row.seq = got[i].Seq
					m.ledger[pk] = row
					if got[i].Seq == 0 {
						rt.Fatalf("event %d recorded without a seq", i)
					}
					want.Seq = got[i].Seq
				}
				if got[i] != want {
					rt.Fatalf("step %d event %d %+v: got %+v, want %+v", step, i, e, got[i], want)
				}
			}
			last = batch
		}
		for id := range m.polls {
			res, err := b.store.Results(b.ctx, id)
			if err != nil {
				rt.Fatalf("results: %v", err)
			}
			for _, cv := range res.Results {
				if want := m.tallies[[2]string{id, cv.CandidateID}]; cv.Votes != want {
					rt.Fatalf("poll %s candidate %s: %d votes, model says %d", id, cv.CandidateID, cv.Votes, want)
				}
			}
		}
		var rows, rejections int
		if err := b.db.Pool.QueryRow(b.ctx, `SELECT (SELECT count(*) FROM poll_events WHERE principal_id LIKE $1),
			(SELECT count(*) FROM poll_event_rejections WHERE principal_id LIKE $1)`, ns+"%").Scan(&rows, &rejections); err != nil {
			rt.Fatal(err)
		}
		if rows != m.ledgerLen || rejections != len(m.rejected) {
			rt.Fatalf("%d ledger rows and %d rejection records, model says %d and %d", rows, rejections, m.ledgerLen, len(m.rejected))
		}
	})
	rep, err := b.store.Rebuild(b.ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Differing != 0 {
		t.Fatalf("projection differs from the ledger: %+v", rep.Diffs())
	}
}
