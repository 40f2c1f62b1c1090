package projector

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"tally/audit"
	"tally/ledger"
)

// This file signs the polls' logs: every Config.CheckpointInterval, when
// the projector holds the log's signer key (Config.LogSigner), it lists
// the heads that changed since their last checkpoint, signs each and
// stores the signed note. Signing is never on the apply path and never
// stops the projector: a failure is logged and counted, and the head is
// still unsigned at the next tick, which tries again.

// Checkpointer is what the projector needs of the ledger to sign its logs.
// *ledger.Store satisfies it.
type Checkpointer interface {
	UnsignedHeads(ctx context.Context) ([]ledger.LogHead, error)
	AddCheckpoint(ctx context.Context, pollID string, size int64, root tlog.Hash, note string) error
}

// checkpointTimeout bounds one round of signing.
const checkpointTimeout = 10 * time.Second

// checkpointLoop signs the changed heads every CheckpointInterval until
// ctx ends.
func (p *Projector) checkpointLoop(ctx context.Context) {
	t := time.NewTicker(p.cfg.CheckpointInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.signHeads(ctx)
		}
	}
}

// signHeads signs and stores a checkpoint of every head that has none of
// its size, and returns how many it stored.
func (p *Projector) signHeads(ctx context.Context) int {
	ctx, cancel := context.WithTimeout(ctx, checkpointTimeout)
	defer cancel()
	heads, err := p.checkpoints.UnsignedHeads(ctx)
	if err != nil {
		p.checkpointFailed(ctx, "list the log heads to sign", "", err)
		return 0
	}
	signed := 0
	for _, h := range heads {
		if err := p.signHead(ctx, h); err != nil {
			p.checkpointFailed(ctx, "sign a checkpoint", h.PollID, err)
			continue
		}
		signed++
	}
	return signed
}

// signHead signs one head and stores its checkpoint.
func (p *Projector) signHead(ctx context.Context, h ledger.LogHead) error {
	signer := p.cfg.LogSigner
	note, err := audit.SignCheckpoint(signer, audit.Origin(signer.Name(), h.PollID), h.Size, h.Root)
	if err != nil {
		return err
	}
	if err := p.checkpoints.AddCheckpoint(ctx, h.PollID, h.Size, h.Root, string(note)); err != nil {
		return err
	}
	p.m.checkpoints.Inc()
	return nil
}

func (p *Projector) checkpointFailed(ctx context.Context, what, poll string, err error) {
	if errors.Is(ctx.Err(), context.Canceled) {
		return // stopping: not a failure
	}
	p.m.checkpointErrs.Inc()
	attrs := []slog.Attr{slog.String("error", err.Error())}
	if poll != "" {
		attrs = append(attrs, slog.String("poll", poll))
	}
	p.log.LogAttrs(context.WithoutCancel(ctx), slog.LevelWarn, what+" failed; the next round tries again", attrs...)
}
