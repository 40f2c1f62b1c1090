package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"tally/client"
)

// Voting and reading the results: the vote gets an event id of its own,
// is sent again with it while intake answers 429 or 503 (after their
// Retry-After) or not at all, and a refusal comes back as a *Problem.
func Example() {
	ctx := context.Background()
	c, err := client.New(client.Config{BaseURL: "http://127.0.0.1:8080", Token: "TOKEN"})
	if err != nil {
		log.Fatal(err)
	}
	choice := "a"
	acc, err := c.Vote(ctx, client.Vote{PollId: "lunch", CandidateId: &choice})
	var p *client.Problem
	switch {
	case errors.As(err, &p) && p.Type == client.ProblemTypeUrnTallyProblemPollClosed:
		log.Fatalf("too late: %s", p.Detail)
	case err != nil:
		log.Fatal(err)
	}
	fmt.Println("vote", acc.EventId, acc.Status) // pending: accepted, not counted yet

	st, err := c.VoteStatus(ctx, acc.EventId)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("vote", st.EventId, st.Status) // recorded once the projector applied it

	res, err := c.Results(ctx, "lunch")
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range res.Results {
		fmt.Println(r.CandidateId, r.Votes)
	}
}
