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

	"tally/audit"
	"tally/ledger"
)

// logResult is the cost of reading and auditing one large poll's log.
type logResult struct {
	leaves     int
	proofs     []time.Duration // one per inclusion proof, sorted
	export     time.Duration   // tally export --checkpoints
	verify     time.Duration   // tally audit verify of that export
	exportSize int64           // bytes
}

func (r logResult) proofQuantile(q float64) time.Duration {
	return r.proofs[min(len(r.proofs)-1, int(q*float64(len(r.proofs))))]
}

// measureLog: PR (inclusion proofs from a large log) and AV (the offline
// audit of its export).
func measureLog(ctx context.Context, e *env, sz sizes, t *table) error {
	load := loadAvg()
	r, err := e.auditLog(ctx, sz.logLeaves, sz.proofs)
	if err != nil {
		return err
	}
	t.add(fig{id: "PR", what: fmt.Sprintf("inclusion proof of a random leaf of a %s-leaf poll log (ledger.Store.InclusionProof, as a receipt of GET /v1/votes/{id}), p99 of %d", count(r.leaves), len(r.proofs)),
		value: float64(r.proofQuantile(0.99).Microseconds()) / 1000, unit: "ms",
		extra: fmt.Sprintf("p50 %s, max %s", ms(r.proofQuantile(0.5)), ms(r.proofs[len(r.proofs)-1])), load: load,
		command: "bench -only log  (log built by COPY and ledger.Store.BuildLogs)"})
	t.add(fig{id: "AV", what: fmt.Sprintf("audit: tally audit verify of a %s-event export against its checkpoint, no database", count(r.leaves)),
		value: r.verify.Seconds(), unit: "s", extra: fmt.Sprintf("export %.0f MB written by tally export --checkpoints in %s", float64(r.exportSize)/1e6, r.export.Round(time.Millisecond)),
		load: load, command: "tally audit verify --export FILE --checkpoints FILE --key KEY"})
	return nil
}

// auditLog builds one poll of n leaves, times proofs inclusion proofs of
// random leaves, signs a checkpoint of the head, exports the ledger with
// it and times tally audit verify of the export, which must verify.
func (e *env) auditLog(ctx context.Context, n, proofs int) (logResult, error) {
	res := logResult{leaves: n}
	url, pool, err := e.database(ctx, "log")
	if err != nil {
		return res, err
	}
	defer pool.Close()
	if err := prepareLedger(ctx, pool, singleLoad, 1); err != nil {
		return res, err
	}
	if err := fillLedger(ctx, pool, singleLoad, n, 1); err != nil {
		return res, err
	}
	store, err := ledger.New(pool, ledger.Config{})
	if err != nil {
		return res, err
	}
	poll := pollID(0)
	head, err := store.Head(ctx, poll)
	if err != nil {
		return res, err
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range proofs {
		leaf := rng.Int64N(head.Size)
		start := time.Now()
		if _, err := store.InclusionProof(ctx, poll, leaf, 0); err != nil {
			return res, fmt.Errorf("inclusion proof of leaf %d: %w", leaf, err)
		}
		res.proofs = append(res.proofs, time.Since(start))
	}
	slices.Sort(res.proofs)

	signerKey, verifierKey, err := audit.GenerateKey("bench.tally.example")
	if err != nil {
		return res, err
	}
	signer, err := audit.NewSigner(signerKey)
	if err != nil {
		return res, err
	}
	note, err := audit.SignCheckpoint(signer, audit.Origin(signer.Name(), poll), head.Size, head.Root)
	if err != nil {
		return res, err
	}
	if err := store.AddCheckpoint(ctx, poll, head.Size, head.Root, string(note)); err != nil {
		return res, err
	}
	export, checkpoints := filepath.Join(e.tmp, "audit.jsonl"), filepath.Join(e.tmp, "checkpoints.jsonl")
	defer os.Remove(export)
	defer os.Remove(checkpoints)
	start := time.Now()
	if out, err := exec.CommandContext(ctx, e.tally, "export", "--database-url", url, "--checkpoints", checkpoints, export).CombinedOutput(); err != nil {
		return res, fmt.Errorf("tally export: %w\n%s", err, out)
	}
	res.export = time.Since(start)
	if fi, err := os.Stat(export); err == nil {
		res.exportSize = fi.Size()
	}
	start = time.Now()
	out, err := exec.CommandContext(ctx, e.tally, "audit", "verify", "--export", export, "--checkpoints", checkpoints, "--key", verifierKey).CombinedOutput()
	if err != nil {
		return res, fmt.Errorf("tally audit verify: %w\n%s", err, out)
	}
	res.verify = time.Since(start)
	return res, nil
}
