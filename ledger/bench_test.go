package ledger_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"tally/internal/testenv"
	"tally/ledger"
	"tally/vote"
)

// BenchmarkAppend appends batches of new events (each a first response of a
// fresh principal) at several batch sizes and reports events/s. Batching
// is the point of the design: the cost per transaction (a commit, a few
// round trips) is shared by the whole batch.
func BenchmarkAppend(b *testing.B) {
	for _, size := range []int{1, 100, 1000, 5000} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			db := testenv.Postgres(b)
			store, err := ledger.New(db.Pool, ledger.Config{})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			if err := store.CreatePoll(ctx, ledger.Poll{ID: "bench", Title: "bench", OpensAt: time.Unix(0, 0),
				Choices: []string{"a", "b", "c", "d"}}); err != nil {
				b.Fatal(err)
			}
			batch := make([]ledger.Event, size)
			n := 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				now := time.Now()
				for j := range batch {
					n++
					batch[j] = ledger.Event{PrincipalID: fmt.Sprintf("p%09d", n), ClientEventID: "k1", PollID: "bench",
						CandidateID: []string{"a", "b", "c", "d"}[n%4], ReceivedAt: now}
				}
				b.StartTimer()
				outs, err := store.Append(ctx, batch)
				if err != nil {
					b.Fatal(err)
				}
				if outs[0].Status != ledger.StatusRecorded {
					b.Fatalf("outcome %s, want recorded", outs[0])
				}
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkAppendKinds appends batches of 1000 ballots of each kind (each
// ballot marking or ranking every choice it may: the most a ballot of the
// kind adds to its poll's figures) into one poll, and reports events/s.
// Against kind=single it is what a kind costs the append; ranked at 4, 8
// and 16 choices and the others at 64 are what vote.MaxRankedChoices and
// vote.MaxBallotChoices are stated from (BENCHMARKS.md). latest is single
// choice of answers latest, 30% of each batch a principal's second or
// later ballot replacing its last.
func BenchmarkAppendKinds(b *testing.B) {
	multiple := func(n int, c []string) string {
		pair := []string{c[n%len(c)], c[(n+1)%len(c)]}
		slices.Sort(pair)
		return vote.Ballot{Kind: vote.KindMultiple, Choices: pair}.Canonical()
	}
	marks := func(k vote.Kind, values int) func(int, []string) string {
		return func(n int, c []string) string {
			bl := vote.Ballot{Kind: k}
			for j, id := range c {
				bl.Marks = append(bl.Marks, vote.Mark{Choice: id, Value: (n + j) % values})
			}
			slices.SortFunc(bl.Marks, func(x, y vote.Mark) int { return strings.Compare(x.Choice, y.Choice) })
			return bl.Canonical()
		}
	}
	ranked := func(n int, c []string) string {
		r := n % len(c)
		return vote.Ballot{Kind: vote.KindRanked, Choices: append(slices.Clone(c[r:]), c[:r]...)}.Canonical()
	}
	single := func(n int, c []string) string { return c[n%len(c)] }
	for _, bc := range []struct {
		kind    string
		spec    vote.Spec
		choices int
		ballot  func(n int, choices []string) string
	}{
		{"single", vote.Spec{}, 4, single},
		{"multiple", vote.Spec{Kind: "multiple", MaxChoices: intp(2)}, 4, multiple},
		{"approve", vote.Spec{Kind: "approve"}, 4, marks(vote.KindApprove, 3)},
		{"score", vote.Spec{Kind: "score", MaxScore: intp(5)}, 4, marks(vote.KindScore, 6)},
		{"ranked", vote.Spec{Kind: "ranked"}, 4, ranked},
		{"ranked", vote.Spec{Kind: "ranked"}, 8, ranked},
		{"ranked", vote.Spec{Kind: "ranked"}, vote.MaxRankedChoices, ranked},
		{"approve", vote.Spec{Kind: "approve"}, vote.MaxBallotChoices, marks(vote.KindApprove, 3)},
		{"score", vote.Spec{Kind: "score", MaxScore: intp(5)}, vote.MaxBallotChoices, marks(vote.KindScore, 6)},
		{"latest", vote.Spec{Answers: "latest"}, 4, single},
	} {
		b.Run(fmt.Sprintf("kind=%s/choices=%d", bc.kind, bc.choices), func(b *testing.B) {
			db := testenv.Postgres(b)
			store, err := ledger.New(db.Pool, ledger.Config{})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			p := ledger.Poll{ID: "bench", Title: "bench", OpensAt: time.Unix(0, 0)}
			for i := range bc.choices {
				p.Choices = append(p.Choices, fmt.Sprintf("c%d", i))
			}
			if p.Rules, err = vote.NewRules(bc.spec, bc.choices); err != nil {
				b.Fatal(err)
			}
			if err := store.CreatePoll(ctx, p); err != nil {
				b.Fatal(err)
			}
			changes := bc.kind == "latest"
			const size = 1000
			batch := make([]ledger.Event, size)
			var ballots []int // by principal: the ballots it has sent
			cursor := 0       // the next principal a change is of
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				now := time.Now()
				before := len(ballots)
				for j := range batch {
					var pr int
					if changes && j%10 >= 7 {
						// a change of a principal of an earlier batch (of
						// this one in the first)
						from := before
						if from == 0 {
							from = len(ballots)
						}
						pr = cursor % from
						cursor++
					} else {
						pr = len(ballots)
						ballots = append(ballots, 0)
					}
					ballots[pr]++
					batch[j] = ledger.EventOf(fmt.Sprintf("p%09d", pr), fmt.Sprintf("k%d", ballots[pr]), p.ID,
						bc.ballot(pr+ballots[pr], p.Choices), now)
				}
				b.StartTimer()
				outs, err := store.Append(ctx, batch)
				if err != nil {
					b.Fatal(err)
				}
				for j, o := range outs {
					if o.Status != ledger.StatusRecorded {
						b.Fatalf("event %d (%s): outcome %s, want recorded", j, batch[j].Answer(), o)
					}
				}
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
