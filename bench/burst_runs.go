package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// This file owns what one burst measured (burstRun) and what the rounds of
// one target add up to (burstSide): rates, medians, and the commits per
// vote beyond the projector's batches.

// burstRun is one burst against one target.
type burstRun struct {
	n        int
	answered time.Duration // from the first request to the last answer
	counted  time.Duration // to the last vote in poll_results
	lat      []time.Duration
	// commits: xact_commit of the database from before the servers
	// started to after they stopped; batches: the projector's;
	// listeners: the backends LISTENing in the database meanwhile.
	commits, batches, listeners int64
}

func (r burstRun) accepted() float64 { return float64(r.n) / r.answered.Seconds() }
func (r burstRun) countedRate() float64 {
	return float64(r.n) / r.counted.Seconds()
}

// burstSide is every round of one target, and the commits of its servers'
// start and stop without votes.
type burstSide struct {
	runs    []burstRun
	startup int64
}

// median is the median of f over the rounds (the lower middle one).
func (s burstSide) median(f func(burstRun) float64) float64 {
	vs := make([]float64, len(s.runs))
	for i, r := range s.runs {
		vs[i] = f(r)
	}
	slices.Sort(vs)
	return vs[(len(vs)-1)/2]
}

func (s burstSide) rounds(f func(burstRun) float64) string {
	var parts []string
	for _, r := range s.runs {
		parts = append(parts, thousands(f(r)))
	}
	return strings.Join(parts, ", ")
}

// perBatch are the commits each projector batch of r causes: its own and
// one per listening backend, which reads its notification.
func (r burstRun) perBatch() int64 { return burstCommitsPerBatch + r.listeners }

// beyond are the commits of r beyond the projector's batches (and the
// listeners' reading of their notifications) and the servers' start and
// stop.
func (s burstSide) beyond(r burstRun) int64 {
	return r.commits - s.startup - r.perBatch()*r.batches
}

// perVote are the commits of r per vote, its servers' start and stop
// left out.
func (s burstSide) perVote(r burstRun) float64 {
	return float64(r.commits-s.startup) / float64(r.n)
}

func p50(r burstRun) float64 { return float64(quantile(r.lat, 0.5)) }
func p99(r burstRun) float64 { return float64(quantile(r.lat, 0.99)) }

// beyondNote is the commits beyond the projector's batches of each round.
func beyondNote(s burstSide) string {
	var parts []string
	for _, r := range s.runs {
		parts = append(parts, strconv.FormatInt(s.beyond(r), 10))
	}
	return strings.Join(parts, ", ")
}

// commitsNote details the commits of each round.
func commitsNote(s burstSide) string {
	var parts []string
	for _, r := range s.runs {
		parts = append(parts, fmt.Sprintf("%d commits for %s votes: %d batches × %d (%d listener(s)), %d beyond",
			r.commits-s.startup, thousands(float64(r.n)), r.batches, r.perBatch(), r.listeners, s.beyond(r)))
	}
	return strings.Join(parts, "; ") + fmt.Sprintf(" (start and stop without votes: %d commits, left out)", s.startup)
}
