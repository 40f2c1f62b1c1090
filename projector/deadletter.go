package projector

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"tally/stream"
)

// Reason is why an entry was dead-lettered: the dl_reason field of its
// record and the reason label of tally_projector_events_total, one of a
// small fixed set.
type Reason string

// The dead-letter reasons.
const (
	ReasonUndecodable         Reason = "undecodable"          // stream.Decode refused the entry
	ReasonFingerprintMismatch Reason = "fingerprint_mismatch" // its fingerprint is not its payload's (version 1 entries only)
	ReasonFailed              Reason = "failed"               // the ledger refused it alone, for a permanent reason
	ReasonMaxDeliveries       Reason = "max_deliveries"       // delivered more than Config.MaxDeliveries times
	ReasonLost                Reason = "lost"                 // deleted from the stream while pending: a tombstone
)

// Fields a dead-letter entry adds to the original entry's fields.
const (
	FieldDLReason     = "dl_reason"     // a Reason
	FieldDLError      = "dl_error"      // what went wrong, for a person
	FieldDLStream     = "dl_stream"     // the stream the entry came from
	FieldDLID         = "dl_id"         // its id there
	FieldDLConsumer   = "dl_consumer"   // the consumer that dead-lettered it
	FieldDLTime       = "dl_time"       // when, RFC 3339 in UTC
	FieldDLDeliveries = "dl_deliveries" // how often it had been delivered (0: unknown)
)

var dlFields = []string{FieldDLReason, FieldDLError, FieldDLStream, FieldDLID, FieldDLConsumer, FieldDLTime, FieldDLDeliveries}

// entryFields is the order of an entry's fields: the current encoding's
// one, then version 1's.
var entryFields = []string{stream.FieldEntry, stream.FieldVersion, stream.FieldPrincipal, stream.FieldEventID,
	stream.FieldPoll, stream.FieldCandidate, stream.FieldFingerprint, stream.FieldReceivedAt}

// deadItem is an entry on its way to the dead-letter stream.
type deadItem struct {
	msg    message
	reason Reason
	detail string // the error, for a person
}

// originalValues returns the original fields of an entry as XADD pairs:
// the known fields in their usual order, then any other in name order.
func originalValues(values map[string]any) []any {
	out := make([]any, 0, 2*len(values))
	for _, f := range entryFields {
		if v, ok := values[f]; ok {
			out = append(out, f, fmt.Sprint(v))
		}
	}
	var rest []string
	for f := range values {
		if !slices.Contains(entryFields, f) && !slices.Contains(dlFields, f) {
			rest = append(rest, f)
		}
	}
	slices.Sort(rest)
	for _, f := range rest {
		out = append(out, f, fmt.Sprint(values[f]))
	}
	return out
}

// deadLetterValues is the record deadLetterScript writes for d: the
// original fields, then the dl_ fields.
func deadLetterValues(d deadItem, consumer string, now time.Time) []any {
	return append(originalValues(d.msg.values),
		FieldDLReason, string(d.reason),
		FieldDLError, d.detail,
		FieldDLStream, d.msg.stream,
		FieldDLID, d.msg.id,
		FieldDLConsumer, consumer,
		FieldDLTime, now.UTC().Format(time.RFC3339Nano),
		FieldDLDeliveries, strconv.FormatInt(d.msg.deliveries, 10),
	)
}

// deadLetterScript moves one entry to the dead-letter stream: XADD to the
// dead-letter stream, then XACK and XDEL on the main stream, atomically.
// When the entry must still be pending (ARGV[3] = "1") and no longer is,
// another consumer handled it already and the script does nothing, so an
// entry is dead-lettered once even when two consumers held it.
//
// KEYS: stream, dead-letter stream (one hash tag). ARGV: group, id,
// must be pending, then the field/value pairs of deadLetterValues.
var deadLetterScript = redis.NewScript(`
if ARGV[3] == "1" and #redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1) == 0 then
  return 0
end
redis.call('XADD', KEYS[2], '*', unpack(ARGV, 4))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return 1`)

// deadLetter moves items to their shard's dead-letter stream (see
// deadLetterScript), in one round trip. When it fails, the entries stay
// pending and come back.
func (p *Projector) deadLetter(applyCtx context.Context, items []deadItem) {
	if len(items) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(applyCtx), redisTimeout)
	defer cancel()
	now := time.Now()
	cmds := make([]*redis.Cmd, len(items))
	_, err := p.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, d := range items {
			mustBePending := "1"
			if d.msg.values == nil {
				mustBePending = "0" // XAUTOCLAIM already dropped it from the pending list
			}
			args := append([]any{stream.Group, d.msg.id, mustBePending}, deadLetterValues(d, p.cfg.Consumer, now)...)
			cmds[i] = deadLetterScript.Eval(ctx, pipe, []string{d.msg.stream, p.keys.DeadLetter(d.msg.shard)}, args...)
		}
		return nil
	})
	if err != nil {
		p.log.LogAttrs(ctx, slog.LevelError, "dead-letter entries failed; they stay pending and come back",
			slog.Int("entries", len(items)), slog.String("error", err.Error()))
	}
	for i, d := range items {
		if n, err := cmds[i].Int(); err != nil || n == 0 {
			continue // failed (logged above), or handled by another consumer
		}
		p.m.events.WithLabelValues(outcomeDeadLettered, string(d.reason)).Inc()
		p.forget(d.msg)
		p.log.LogAttrs(ctx, slog.LevelWarn, "entry dead-lettered",
			slog.String("stream", d.msg.stream), slog.String("id", d.msg.id),
			slog.String("reason", string(d.reason)), slog.String("error", d.detail))
	}
}
