package main

import (
	"os"
	"path/filepath"
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

// wrkBurstOutput is what wrk and testdata/burst_vote.lua print of a burst
// of 2,000 votes (the figures of a run against the bare handler).
const wrkBurstOutput = `Running 20s test @ http://127.0.0.1:28197
  2 threads and 64 connections
  Latency Distribution
     50%  711.00us
     75%    2.72ms
     90%    8.45ms
     99%   35.81ms
  2000 requests in 2.99s, 345.70KB read
Requests/sec:    668.02
burst: lines 2000, sent 2000, answered 2000, other than 202: 0; first request 1796514498316905 us, last answer 1796514498501915 us
`

func TestParseWrkBurst(t *testing.T) {
	var r burstRun
	r.n = 2000
	start, err := parseWrkBurst([]byte(wrkBurstOutput), 2000, &r)
	if err != nil {
		t.Fatal(err)
	}
	if want := time.UnixMicro(1796514498316905); !start.Equal(want) {
		t.Errorf("start = %v, want %v", start, want)
	}
	if r.answered != 185010*time.Microsecond || r.p50 != 711*time.Microsecond || r.p99 != 35810*time.Microsecond {
		t.Errorf("answered %v, p50 %v, p99 %v; want 185.01ms, 711µs, 35.81ms", r.answered, r.p50, r.p99)
	}
	for name, out := range map[string]string{
		"refused":       strings.Replace(wrkBurstOutput, "other than 202: 0", "other than 202: 3", 1),
		"unanswered":    strings.Replace(wrkBurstOutput, "answered 2000", "answered 1999", 1),
		"fewer lines":   strings.Replace(wrkBurstOutput, "lines 2000", "lines 1999", 1),
		"socket errors": wrkBurstOutput + "  Socket errors: connect 0, read 1, write 0, timeout 0\n",
		"no burst line": strings.Split(wrkBurstOutput, "burst:")[0],
	} {
		if _, err := parseWrkBurst([]byte(out), 2000, &burstRun{}); err == nil {
			t.Errorf("%s: parseWrkBurst took it", name)
		}
	}
}

// TestWriteBurstVotes: vote i goes to the file of wrk's thread i mod
// burstWrkThreads, as "auth TAB body"; a tab or a newline in a vote fails.
func TestWriteBurstVotes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "votes")
	bodies := [][]byte{[]byte(`{"a":0}`), []byte(`{"a":1}`), []byte(`{"a":2}`)}
	auths := []string{"Bearer t0", "Bearer t1", "Bearer t2"}
	if err := writeBurstVotes(path, bodies, auths); err != nil {
		t.Fatal(err)
	}
	want := []string{"Bearer t0\t{\"a\":0}\nBearer t2\t{\"a\":2}\n", "Bearer t1\t{\"a\":1}\n"}
	for k, w := range want {
		got, err := os.ReadFile(path + "." + itoa(k))
		if err != nil || string(got) != w {
			t.Errorf("file %d = %q, %v; want %q", k, got, err, w)
		}
	}
	if err := writeBurstVotes(path, [][]byte{[]byte("{}\n")}, []string{"Bearer t"}); err == nil {
		t.Error("writeBurstVotes took a body with a newline")
	}
}

func TestCPUNote(t *testing.T) {
	s := burstSide{runs: []burstRun{
		{n: 100, cpu: cpuPerVote{votes: 100, intakes: 80, projector: 30, postgres: 40, redis: 30, client: 50}},
		{n: 100, cpu: cpuPerVote{votes: 100, intakes: 90, projector: 20, postgres: 40, redis: 30, client: 70}},
	}}
	got := s.cpuNote(cpuIntake, cpuProjector, cpuPostgres, cpuRedis)
	if want := "CPU per vote: intake 85 µs, projector 25 µs, PostgreSQL 40 µs, Redis 30 µs (server side 180 µs); client 60 µs"; got != want {
		t.Errorf("cpuNote = %q, want %q", got, want)
	}
	if got, want := s.cpuNote(cpuServer), "CPU per vote: server 85 µs; client 60 µs"; got != want {
		t.Errorf("cpuNote = %q, want %q", got, want)
	}
}
