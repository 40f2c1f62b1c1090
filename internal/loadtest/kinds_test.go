package loadtest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"tally/internal/loadtest"
	"tally/vote"
)

// kindRun is a mixed load of polls of one kind and answers mode.
func kindRun(t *testing.T, p *pipeline, kind vote.Kind, answers vote.Answers) loadtest.Report {
	t.Helper()
	cfg := loadtest.Config{
		Targets: []string{p.url}, Votes: 600, Concurrency: 8, Principals: 30, PollChoices: 4,
		Kind: kind, Answers: answers,
		RetryShare: 0.10, KeyReuseShare: 0.05, SecondResponseShare: 0.30,
		DrainTimeout: 30 * time.Second, Seed: 7, Logger: testLogger(t),
	}
	rep, err := loadtest.Run(context.Background(), cfg, p.deps())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !rep.Passed() {
		t.Fatalf("verification of %s/%s failed: %s", kind, answers, strings.Join(rep.Failures(), "\n"))
	}
	return rep
}

// Every kind, final and latest, through a real intake and projector: the
// projection of every figure equals the ground truth's count, and in a
// latest poll every second response is recorded (none already_responded)
// and all but each principal's last read superseded.
func TestLoadtestKinds(t *testing.T) {
	t.Parallel()
	p := setup(t, true)
	for _, kind := range vote.Kinds {
		for _, answers := range []vote.Answers{vote.AnswersFinal, vote.AnswersLatest} {
			if kind == vote.KindSingle && answers == vote.AnswersFinal {
				continue // TestLoadtestVerifies
			}
			t.Run(fmt.Sprintf("%s-%s", kind, answers), func(t *testing.T) {
				rep := kindRun(t, p, kind, answers)
				ok := rep.AcceptedByKind
				switch answers {
				case vote.AnswersLatest:
					if rep.Recorded != ok["first_response"]+ok["second_response"] || rep.Rejected["already_responded"] != 0 {
						t.Errorf("recorded %d, rejected %v; want every accepted response recorded (%d)", rep.Recorded, rep.Rejected,
							ok["first_response"]+ok["second_response"])
					}
				default:
					if rep.Recorded != ok["first_response"] || rep.Rejected["already_responded"] != ok["second_response"] {
						t.Errorf("recorded %d, rejected %v; want %d and %d already_responded", rep.Recorded, rep.Rejected,
							ok["first_response"], ok["second_response"])
					}
				}
				if ok["second_response"] == 0 {
					t.Errorf("no second response was accepted: %v", ok)
				}
			})
		}
	}
}
