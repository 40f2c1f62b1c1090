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
	p50, p99 time.Duration // of the answers
	// cpu is the CPU time per vote of the servers, from before the first
	// request until the last vote was counted (answered, for a server
	// that counts nothing), and of the client while it sent.
	cpu cpuPerVote
	// clientCPU is the client's CPU time while it sent, in seconds.
	clientCPU float64
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

func p50(r burstRun) float64 { return float64(r.p50) }
func p99(r burstRun) float64 { return float64(r.p99) }

// cpuPart is one part of a vote's CPU time a row shows.
type cpuPart struct {
	name string
	of   func(cpuPerVote) float64
}

var (
	cpuIntake    = cpuPart{"intake", func(c cpuPerVote) float64 { return c.intakes }}
	cpuServer    = cpuPart{"server", func(c cpuPerVote) float64 { return c.intakes }} // a baseline's, in intake's place
	cpuProjector = cpuPart{"projector", func(c cpuPerVote) float64 { return c.projector }}
	cpuPostgres  = cpuPart{"PostgreSQL", func(c cpuPerVote) float64 { return c.postgres }}
	cpuRedis     = cpuPart{"Redis", func(c cpuPerVote) float64 { return c.redis }}
)

// cpu is the CPU time per vote over every round of s.
func (s burstSide) cpu() cpuPerVote {
	cs := make([]cpuPerVote, len(s.runs))
	for i, r := range s.runs {
		cs[i] = r.cpu
	}
	return poolCPU(cs)
}

// cpuNote says where a vote's CPU time went, over every round of s: in
// each of the server-side parts, their sum, and in the client.
func (s burstSide) cpuNote(parts ...cpuPart) string {
	c := s.cpu()
	if c.votes == 0 {
		return "CPU per vote: not measured"
	}
	var b strings.Builder
	b.WriteString("CPU per vote: ")
	sum := 0.0
	for i, p := range parts {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %.0f µs", p.name, p.of(c))
		sum += p.of(c)
	}
	if len(parts) > 1 {
		fmt.Fprintf(&b, " (server side %.0f µs)", sum)
	}
	fmt.Fprintf(&b, "; client %.0f µs", c.client)
	return b.String()
}

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
