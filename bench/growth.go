package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"tally/audit"
	"tally/ledger"
	"tally/stream"
)

// This file owns row G, the growth of the ledger (issue 35): the
// projector's drain rate into an empty ledger and into one that holds
// nearly growthEvents events, and, on that ledger once full, a rebuild,
// an export with its checkpoints and the offline audit of it, inclusion
// proofs (a receipt's), and the bytes per event on disk. The ledger's
// middle is filled by COPY with every index and constraint in place
// (fillLedger); only the drains go through the projector. A full run
// runs it only when -only names it: at 5M events it takes longer than
// the rest of a row.

// growthResult is what the growth measurement measured.
type growthResult struct {
	events             int // in the ledger at the end
	drain              int // events of each drain
	start, end         drainResult
	fill               time.Duration // the COPY of the middle, its projection and logs
	rebuild            time.Duration
	export, verify     time.Duration
	exportSize         int64
	proofs             []time.Duration // sorted
	proofLeaves        int64           // of the poll the proofs are of
	bytes, idx, logTbl int64           // on disk at the end
}

// measureGrowth: G-start, G-end, G-rebuild, G-export, G-audit, G-proof
// and G-disk.
func measureGrowth(ctx context.Context, e *env, sz sizes, t *table) error {
	load := loadAvg()
	r, err := e.growth(ctx, sz.growthEvents, sz.growthDrain, sz.projectorLimit)
	if err != nil {
		return err
	}
	cmd := fmt.Sprintf("bench -only growth  (%s events over 10 polls: the first %s and the last %s through tally projector, shipped settings; the middle by COPY with every index, in %s)",
		count(r.events), count(r.drain), count(r.drain), r.fill.Round(time.Second))
	t.add(fig{id: "G-start", what: fmt.Sprintf("growth: projector draining %s events into an empty ledger", count(r.drain)),
		value: r.start.rate(), unit: "events/s", load: load, command: cmd, extra: r.start.cpu()})
	t.add(fig{id: "G-end", what: fmt.Sprintf("growth: projector draining %s events into a ledger of %s", count(r.drain), count(r.events-r.drain)),
		value: r.end.rate(), unit: "events/s", load: load, command: cmd, extra: r.end.cpu()})
	t.add(fig{id: "G-rebuild", what: fmt.Sprintf("growth: tally rebuild (ledger.Store.Rebuild) of the %s-event ledger, recount and every log, one cold run", count(r.events)),
		value: r.rebuild.Seconds(), unit: "s", load: load, command: cmd})
	t.add(fig{id: "G-export", what: fmt.Sprintf("growth: tally export --checkpoints of the %s-event ledger", count(r.events)),
		value: r.export.Seconds(), unit: "s", load: load, command: "tally export --checkpoints FILE FILE",
		extra: fmt.Sprintf("%.0f MB, %.0f B per event", float64(r.exportSize)/1e6, float64(r.exportSize)/float64(r.events))})
	t.add(fig{id: "G-audit", what: fmt.Sprintf("growth: tally audit verify of that export against each poll's checkpoint, no database (%s events)", count(r.events)),
		value: r.verify.Seconds(), unit: "s", load: load, command: "tally audit verify --export FILE --checkpoints FILE --key KEY"})
	t.add(fig{id: "G-proof", what: fmt.Sprintf("growth: inclusion proof of a random leaf of a %s-leaf poll log (a receipt's), p99 of %d", count(int(r.proofLeaves)), len(r.proofs)),
		value: msOf(quantile(r.proofs, 0.99)), unit: "ms", load: load, command: "ledger.Store.InclusionProof after the growth",
		extra: fmt.Sprintf("p50 %s, max %s", ms(quantile(r.proofs, 0.5)), ms(r.proofs[len(r.proofs)-1]))})
	t.add(fig{id: "G-disk", what: fmt.Sprintf("growth: bytes per event on disk, the ledger and its log with their indexes, at %s events", count(r.events)),
		value: float64(r.bytes) / float64(r.events), unit: "B", load: load, command: "pg_total_relation_size of poll_events and poll_log_*",
		extra: fmt.Sprintf("of which indexes %.0f B, the log's tables %.0f B", float64(r.idx)/float64(r.events), float64(r.logTbl)/float64(r.events))})
	return nil
}

// growth measures the drain into an empty ledger (a database of its own),
// then fills a ledger with n-drain events by COPY, drains the last drain
// events into it, and measures the full ledger.
func (e *env) growth(ctx context.Context, n, drain int, limit time.Duration) (growthResult, error) {
	res := growthResult{events: n, drain: drain}
	var err error
	if res.start, err = e.drainProjector(ctx, e.tally, "growthstart", drain, limit); err != nil {
		return res, err
	}
	if res.start.events < drain {
		return res, fmt.Errorf("the projector applied %d of %d events into an empty ledger within %s", res.start.events, drain, limit)
	}
	e.settle(ctx)

	url, pool, err := e.database(ctx, "growth")
	if err != nil {
		return res, err
	}
	defer pool.Close()
	const polls = 10
	if err := createLoadPolls(ctx, pool, polls, singleLoad); err != nil {
		return res, err
	}
	t0 := time.Now()
	if err := fillLedger(ctx, pool, singleLoad, n-drain, polls); err != nil {
		return res, fmt.Errorf("fill the ledger: %w", err)
	}
	res.fill = time.Since(t0)
	if res.end, err = e.drainInto(ctx, url, n-drain, n, polls, limit); err != nil {
		return res, err
	}
	if res.end.events < drain {
		return res, fmt.Errorf("the projector applied %d of %d events into a ledger of %d within %s", res.end.events, drain, n-drain, limit)
	}
	if res.bytes, res.idx, res.logTbl, err = ledgerBytes(ctx, pool); err != nil {
		return res, err
	}
	store, err := ledger.New(pool, ledger.Config{})
	if err != nil {
		return res, err
	}
	if res.rebuild, err = timeRebuild(ctx, store, n); err != nil {
		return res, err
	}
	if err := e.proofsOf(ctx, store, &res); err != nil {
		return res, err
	}
	return res, e.exportAudit(ctx, store, url, polls, &res)
}

// drainInto preloads events first..last-1 of singleLoad into a stream of
// its own, runs tally projector (shipped settings) on url until the
// stream is empty, at most limit, and returns the drain.
func (e *env) drainInto(ctx context.Context, url string, first, last, polls int, limit time.Duration) (drainResult, error) {
	var res drainResult
	keys := e.prefix("growth")
	defer e.dropPrefix(context.WithoutCancel(ctx), keys.Prefix())
	now := time.Now()
	const chunk = 10_000
	for from := first; from < last; from += chunk {
		_, err := e.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for i := from; i < min(from+chunk, last); i++ {
				ev := singleLoad.event(i, polls, now)
				entry := stream.Entry{PrincipalID: ev.PrincipalID, ClientEventID: ev.ClientEventID, PollID: ev.PollID,
					CandidateID: ev.CandidateID, Ballot: ev.Ballot, ReceivedAt: now}
				pipe.XAdd(ctx, &redis.XAddArgs{Stream: keys.Stream(0), Values: stream.Values(entry)})
			}
			return nil
		})
		if err != nil {
			return res, fmt.Errorf("preload: %w", err)
		}
	}
	// The pool that filled the ledger keeps its backends: count only the
	// CPU they use from here.
	redis0, pg0 := e.redisCPU(ctx), e.backendCPU(ctx, e.dbName("growth"))
	p, err := start(ctx, logFile, e.tally, "projector", "--allow-superuser", "--database-url", url, "--redis-url", e.redisURL,
		"--stream-prefix", keys.Prefix(), "--consumer", "bench", "--log-level", "warn", "--log-format", "text")
	if err != nil {
		return res, err
	}
	n := last - first
	firstApplied, err := e.waitDrained(ctx, p, keys, n, limit)
	if err != nil {
		return res, err
	}
	res.drain = time.Since(firstApplied)
	projCPU, pgCPU := cpuSeconds(p.cmd.Process.Pid), e.backendCPU(ctx, e.dbName("growth"))-pg0
	redisCPU := e.redisCPU(ctx) - redis0
	if err := p.stop(); err != nil {
		return res, fmt.Errorf("projector: %w", err)
	}
	left, err := e.rdb.XLen(ctx, keys.Stream(0)).Result()
	if err != nil {
		return res, err
	}
	res.events = n - int(left)
	if res.events > 0 {
		res.projCPU, res.pgCPU = 1e6*projCPU/float64(res.events), 1e6*pgCPU/float64(res.events)
		res.redisCPU = 1e6 * redisCPU / float64(res.events)
	}
	if dl, _ := e.rdb.XLen(ctx, keys.DeadLetter(0)).Result(); dl != 0 {
		return res, fmt.Errorf("%d entries were dead-lettered", dl)
	}
	return res, nil
}

// proofsOf times inclusion proofs of random leaves of poll 0's log.
func (e *env) proofsOf(ctx context.Context, store *ledger.Store, res *growthResult) error {
	head, err := store.Head(ctx, pollID(0))
	if err != nil {
		return err
	}
	res.proofLeaves = head.Size
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		leaf := rng.Int64N(head.Size)
		t0 := time.Now()
		if _, err := store.InclusionProof(ctx, pollID(0), leaf, 0); err != nil {
			return fmt.Errorf("inclusion proof of leaf %d: %w", leaf, err)
		}
		res.proofs = append(res.proofs, time.Since(t0))
	}
	slices.Sort(res.proofs)
	return nil
}

// exportAudit signs a checkpoint of each poll's head, times tally export
// --checkpoints of the whole ledger and tally audit verify of the export,
// which must verify.
func (e *env) exportAudit(ctx context.Context, store *ledger.Store, url string, polls int, res *growthResult) error {
	signerKey, verifierKey, err := audit.GenerateKey("bench.tally.example")
	if err != nil {
		return err
	}
	signer, err := audit.NewSigner(signerKey)
	if err != nil {
		return err
	}
	for i := range polls {
		head, err := store.Head(ctx, pollID(i))
		if err != nil {
			return err
		}
		note, err := audit.SignCheckpoint(signer, audit.Origin(signer.Name(), pollID(i)), head.Size, head.Root)
		if err != nil {
			return err
		}
		if err := store.AddCheckpoint(ctx, pollID(i), head.Size, head.Root, string(note)); err != nil {
			return err
		}
	}
	export, checkpoints := filepath.Join(e.tmp, "growth.jsonl"), filepath.Join(e.tmp, "growth-checkpoints.jsonl")
	defer os.Remove(export)
	defer os.Remove(checkpoints)
	t0 := time.Now()
	if out, err := exec.CommandContext(ctx, e.tally, "export", "--database-url", url, "--checkpoints", checkpoints, export).CombinedOutput(); err != nil {
		return fmt.Errorf("tally export: %w\n%s", err, lastLines(out, 5))
	}
	res.export = time.Since(t0)
	if fi, err := os.Stat(export); err == nil {
		res.exportSize = fi.Size()
	}
	t0 = time.Now()
	if out, err := exec.CommandContext(ctx, e.tally, "audit", "verify", "--export", export, "--checkpoints", checkpoints, "--key", verifierKey).CombinedOutput(); err != nil {
		return fmt.Errorf("tally audit verify: %w\n%s", err, lastLines(out, 5))
	}
	res.verify = time.Since(t0)
	return nil
}
