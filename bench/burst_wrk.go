package main

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// This file owns the burst's main client: wrk, with the script
// testdata/burst_vote.lua, which posts each vote of a file once, as a
// client of its own machine would, at a fraction of the Go client's CPU.

//go:embed testdata/burst_vote.lua
var burstScript []byte

// burstWrkThreads are wrk's threads (-t); its connections are
// burstConcurrency.
const burstWrkThreads = 2

var (
	wrkBurstLine = regexp.MustCompile(`burst: lines (\d+), sent (\d+), answered (\d+), other than \d+: (\d+); first request (\d+) us, last answer (\d+) us`)
	wrkSocket    = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
)

// wrkBurst is sendBurst with wrk as the client: it writes the votes to a
// file per wrk thread, runs wrk for at most limit, and interrupts it once
// every thread stopped (each does after its last answer). The script
// times the burst and counts the answers other than want, which fail it;
// r gets the time from the first request to the last answer, wrk's p50
// and p99, and wrk's CPU time (its start, reading its file, included).
func (e *env) wrkBurst(ctx context.Context, addr string, bodies [][]byte, auths []string, want int, limit time.Duration, r *burstRun) (time.Time, error) {
	if e.wrk == "" {
		return time.Time{}, errors.New("the burst needs wrk (scripts/bench.sh installs it with apt-get when missing)")
	}
	dir, err := os.MkdirTemp(e.tmp, "burst-")
	if err != nil {
		return time.Time{}, err
	}
	defer os.RemoveAll(dir)
	script, votes := filepath.Join(dir, "burst_vote.lua"), filepath.Join(dir, "votes")
	if err := os.WriteFile(script, burstScript, 0o644); err != nil {
		return time.Time{}, err
	}
	if err := writeBurstVotes(votes, bodies, auths); err != nil {
		return time.Time{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, limit+30*time.Second)
	defer cancel()
	args := []string{"-t" + itoa(burstWrkThreads), "-c" + itoa(burstConcurrency), fmt.Sprintf("-d%ds", int(limit.Seconds())),
		"--timeout", "10s", "--latency", "-s", script, "http://" + addr, "--", votes, itoa(want)}
	cmd := exec.CommandContext(ctx, e.wrk, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return time.Time{}, fmt.Errorf("wrk: %w", err)
	}
	if err := interruptWhenSpent(ctx, cmd); err != nil {
		return time.Time{}, fmt.Errorf("wrk: %w\n%s", err, out.Bytes())
	}
	r.clientCPU = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	return parseWrkBurst(out.Bytes(), len(bodies), r)
}

// writeBurstVotes writes vote i, "auth TAB body", to the file path.k of
// wrk's thread k = i mod burstWrkThreads.
func writeBurstVotes(path string, bodies [][]byte, auths []string) error {
	for k := range burstWrkThreads {
		f, err := os.Create(path + "." + itoa(k))
		if err != nil {
			return err
		}
		w := bufio.NewWriter(f)
		for i := k; i < len(bodies); i += burstWrkThreads {
			if strings.ContainsAny(auths[i], "\t\n") || bytes.ContainsAny(bodies[i], "\t\n") {
				f.Close()
				return fmt.Errorf("vote %d holds a tab or a newline, which wrk's vote file cannot carry", i)
			}
			w.WriteString(auths[i])
			w.WriteByte('\t')
			w.Write(bodies[i])
			w.WriteByte('\n')
		}
		if err := w.Flush(); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	return nil
}

// interruptWhenSpent waits for wrk, run by cmd, to exit, and sends it
// SIGINT once its worker threads are gone: wrk's main thread sleeps for
// the whole -d, whatever its threads do. It looks every 2ms.
func interruptWhenSpent(ctx context.Context, cmd *exec.Cmd) error {
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	tasks := fmt.Sprintf("/proc/%d/task", cmd.Process.Pid)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	sawThreads, interrupted := false, false
	for {
		select {
		case err := <-exited:
			return err
		case <-ctx.Done():
			return <-exited // CommandContext kills it
		case <-tick.C:
		}
		if interrupted {
			continue
		}
		ts, err := os.ReadDir(tasks)
		if err != nil {
			continue // exiting
		}
		switch {
		case len(ts) > 1:
			sawThreads = true
		case sawThreads:
			_ = cmd.Process.Signal(os.Interrupt)
			interrupted = true
		}
	}
}

// parseWrkBurst reads what wrk and the script printed of a burst of n
// votes into r, and returns when the first request went.
func parseWrkBurst(out []byte, n int, r *burstRun) (time.Time, error) {
	m := wrkBurstLine.FindSubmatch(out)
	if m == nil {
		return time.Time{}, fmt.Errorf("wrk printed no burst line:\n%s", out)
	}
	var v [6]int64
	for i := range v {
		v[i], _ = strconv.ParseInt(string(m[i+1]), 10, 64)
	}
	lines, answered, refused, first, last := v[0], v[2], v[3], v[4], v[5]
	start := time.UnixMicro(first)
	r.answered = time.Duration(last-first) * time.Microsecond
	for _, m := range wrkPct.FindAllSubmatch(out, -1) {
		f, _ := strconv.ParseFloat(string(m[2]), 64)
		unit := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second}[string(m[3])]
		if string(m[1]) == "50" {
			r.p50 = time.Duration(f * float64(unit))
		} else {
			r.p99 = time.Duration(f * float64(unit))
		}
	}
	switch {
	case lines != int64(n):
		return start, fmt.Errorf("wrk read %d votes of %d", lines, n)
	case refused > 0:
		return start, fmt.Errorf("%d votes answered with another status than the one wanted", refused)
	case answered < int64(n) || last == 0:
		return start, fmt.Errorf("%d of %d votes answered within wrk's -d", answered, n)
	}
	if m := wrkSocket.FindSubmatch(out); m != nil {
		return start, fmt.Errorf("wrk: %s", m[0])
	}
	return start, nil
}
