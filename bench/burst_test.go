package main

import (
	"strings"
	"testing"
	"time"
)

func TestMetricValue(t *testing.T) {
	const text = `# HELP tally_projector_batch_size Events per applied batch.
# TYPE tally_projector_batch_size histogram
tally_projector_batch_size_bucket{le="1"} 0
tally_projector_batch_size_bucket{le="+Inf"} 21
tally_projector_batch_size_sum 20000
tally_projector_batch_size_count 21
tally_projector_batch_size_count_other 5
`
	got, err := metricValue(strings.NewReader(text), "tally_projector_batch_size_count")
	if err != nil || got != 21 {
		t.Fatalf("metricValue = %d, %v; want 21", got, err)
	}
	got, err = metricValue(strings.NewReader(text), "tally_projector_absent")
	if err != nil || got != 0 {
		t.Fatalf("metricValue of an absent sample = %d, %v; want 0", got, err)
	}
	if _, err := metricValue(strings.NewReader("x_count NaNx\n"), "x_count"); err == nil {
		t.Fatal("metricValue took a value that is not a number")
	}
}

// TestBurstSideCommits: the commits of a round are what the servers'
// start and stop and the projector's batches (with a commit of each
// listener for each) leave.
func TestBurstSideCommits(t *testing.T) {
	s := burstSide{startup: 15, runs: []burstRun{
		{n: 20_000, commits: 15 + 3*25 + 7, batches: 25, listeners: 1, answered: 2 * time.Second, counted: 4 * time.Second},
		{n: 20_000, commits: 15 + 2*20, batches: 20, answered: time.Second, counted: 2 * time.Second},
		{n: 20_000, commits: 15 + 3*30 + 3, batches: 30, listeners: 1, answered: 4 * time.Second, counted: 5 * time.Second},
	}}
	if got := s.beyond(s.runs[0]); got != 7 {
		t.Errorf("beyond = %d, want 7", got)
	}
	if got, want := s.perVote(s.runs[1]), 40.0/20_000; got != want {
		t.Errorf("perVote = %g, want %g", got, want)
	}
	if got := s.median(burstRun.accepted); got != 10_000 {
		t.Errorf("median accepted = %g, want 10,000 (of 10k, 20k and 5k)", got)
	}
	if got := s.median(burstRun.countedRate); got != 5_000 {
		t.Errorf("median counted = %g, want 5,000 (of 5k, 10k and 4k)", got)
	}
	if got := beyondNote(s); got != "7, 0, 3" {
		t.Errorf("beyondNote = %q", got)
	}
	if got := s.rounds(burstRun.accepted); got != "10,000, 20,000, 5,000" {
		t.Errorf("rounds = %q", got)
	}
}
