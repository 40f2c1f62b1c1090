package ogentest_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"tally/client/internal/clienttest"
	"tally/client/ogentest/ogenclient"
	"tally/intake"
	"tally/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// bearer is the security source of one principal's token.
type bearer string

func (b bearer) Bearer(context.Context, ogenclient.OperationName) (ogenclient.Bearer, error) {
	return ogenclient.Bearer{Token: string(b)}, nil
}

func newClient(t *testing.T, in *clienttest.Intake, token string) *ogenclient.Client {
	t.Helper()
	c, err := ogenclient.NewClient(in.URL, bearer(token), ogenclient.WithClient(in.HTTP))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ogen's client drives a real intake: a poll is created, a vote sent and
// sent again with its event id, its status and the poll's results read,
// and a bad vote refused with a typed problem.
func TestOgenClientAgainstIntake(t *testing.T) {
	in := clienttest.Start(t, intake.Config{})
	ctx := t.Context()
	admin, voter := newClient(t, in, in.Admin), newClient(t, in, in.Voter)

	res, err := admin.CreatePoll(ctx, ogenclient.NewPollRequestPollRequests(ogenclient.PollRequest{
		PollID: "lunch", Title: "Lunch", Choices: []ogenclient.ID{"a", "b"}}))
	if p, ok := res.(*ogenclient.PollHeaders); err != nil || !ok || p.Response.PollID != "lunch" {
		t.Fatalf("create poll lunch: %#v, %v; want 201 with the poll", res, err)
	}
	results := func() *ogenclient.Results {
		t.Helper()
		res, err := voter.GetResults(ctx, ogenclient.GetResultsParams{PollID: "lunch"})
		if err != nil {
			t.Fatal(err)
		}
		if r, ok := res.(*ogenclient.ResultsHeaders); ok {
			return &r.Response
		}
		return nil
	}
	// Until intake's catalog holds the new poll, its results are 404.
	testenv.Eventually(t, 15*time.Second, "intake's catalog to hold poll lunch", func() bool { return results() != nil })

	vote := &ogenclient.Vote{EventID: "ogen-1", PollID: "lunch", CandidateID: ogenclient.NewOptID("a")}
	for range 2 { // the same vote again is 202 too
		res, err := voter.PostVote(ctx, vote)
		if a, ok := res.(*ogenclient.AcceptedHeaders); err != nil || !ok || a.Response.EventID != "ogen-1" || a.Location != "/v1/votes/ogen-1" {
			t.Fatalf("vote ogen-1: %#v, %v; want 202", res, err)
		}
	}
	testenv.Eventually(t, 20*time.Second, "ogen-1 recorded", func() bool {
		res, err := voter.GetVote(ctx, ogenclient.GetVoteParams{EventID: "ogen-1"})
		st, ok := res.(*ogenclient.EventStatusHeaders)
		if err != nil || !ok {
			t.Fatalf("status of ogen-1: %#v, %v", res, err)
		}
		if s := st.Response.Status; s != ogenclient.StatusRecorded && s != ogenclient.StatusPending {
			t.Fatalf("status of ogen-1: %s, want recorded", s)
		}
		return st.Response.Status == ogenclient.StatusRecorded
	})
	// Results are read at most once a second per poll: wait for the vote.
	testenv.Eventually(t, 10*time.Second, "the results to count one vote, for a", func() error {
		r := results()
		if r == nil || r.Total != 1 || len(r.Results) == 0 || r.Results[0].CandidateID != "a" || r.Results[0].Votes != 1 {
			return fmt.Errorf("results %#v", r)
		}
		return nil
	})

	res2, err := voter.PostVote(ctx, &ogenclient.Vote{EventID: "ogen-2", PollID: "lunch", CandidateID: ogenclient.NewOptID("zz")})
	p, ok := res2.(*ogenclient.ProblemInvalidBallotOrInvalidChoiceOrPollClosedHeaders)
	if err != nil || !ok || p.Response.Status != 422 || p.Response.Detail == "" ||
		p.Response.Type != ogenclient.ProblemInvalidBallotOrInvalidChoiceOrPollClosedTypeUrnTallyProblemInvalidChoice {
		t.Fatalf("a vote for no choice: %#v, %v; want 422 invalid-choice", res2, err)
	}
}
