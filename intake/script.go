package intake

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"tally/stream"
)

// This file owns the enqueue script: its source, its argument layout (which
// ARGV carries what, and how a vote's arguments are laid out in its
// scriptCall) and the contract of its reply (decodeEnqueue).

// enqueueSrc is the one script a vote costs. All four keys carry the
// principal's shard hash tag.
//
//	KEYS[1] idempotency record (string), KEYS[2] rate-limit bucket (string),
//	KEYS[3] the shard's stream, KEYS[4] the shard's epoch (string)
//	ARGV[1] emission interval in microseconds (1e6 / rate), ARGV[2] burst
//	tolerance in microseconds, ARGV[3] record lifetime in milliseconds,
//	ARGV[4] max backlog, ARGV[5] principal, ARGV[6] client event id,
//	ARGV[7] poll, ARGV[8] candidate, ARGV[9] payload fingerprint,
//	ARGV[10] received_at (µs since the epoch), ARGV[11] the principal's
//	created_at (µs since the epoch), ARGV[12] "1" to check that an absent
//	record is conclusive, "0" once the ledger said the event id is new
//
// It answers a small integer, which go-redis reads without allocating, or
// a pair for the rare refusals:
//
//	0 (replyAccepted)            XADDed
//	1 (replyReplay)              the same key with the same payload is
//	                             known; nothing is enqueued (the record is
//	                             rewritten as it is, so that a WAIT after it
//	                             also covers the original write)
//	2 (replyConflict)            the same key is known with another
//	                             payload; nothing changes
//	{3 (replyLimited), µs}       the principal's rate is spent for that long
//	{4 (replyBacklog), length}   the stream holds max backlog entries
//	5 (replyUnsure)              there is no record, but the principal may
//	                             have events whose records are gone; nothing
//	                             changes (the rate is not spent): ask the
//	                             ledger, then run again with ARGV[12] "0"
//
// The idempotency record is a string, "poll candidate", written with its
// lifetime by the same SET NX GET that looks it up, so a new vote costs one
// call for both. A vote that is then refused deletes it again, within the
// script, so nobody ever sees it. The SET goes through pcall so that its
// error (a Redis before 7.0 has no SET ... NX GET) is answered as Redis
// gave it, which enqueue recognizes.
//
// An absent record is conclusive (the event id is new for the principal)
// only if every event of the principal still has its record. A record
// lives ARGV[3] after its vote; the shard's epoch (KEYS[4], set here when
// absent, on Redis' clock) says since when this Redis holds records, and is
// lost with them. So every event received before max(now - window, epoch)
// may have lost its record, and none after: a principal created at or
// after that cutoff has no such event, and any other is answered unsure.
//
// The rate limit is GCRA on Redis' clock: the bucket key holds the
// theoretical arrival time (µs) and expires once it is in the past. Only an
// accepted vote moves it.
//
// The XADD's fields are the stream package's encoding (see xaddFields).
var enqueueSrc = `
local record = ARGV[7] .. ' ' .. ARGV[8]
local known = redis.pcall('SET', KEYS[1], record, 'NX', 'GET', 'PX', ARGV[3])
if type(known) == 'table' then
  return known
end
if known then
  if known == record then
    redis.call('SET', KEYS[1], known, 'KEEPTTL')
    return 1
  end
  return 2
end
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
if ARGV[12] == '1' then
  local cutoff = tonumber(redis.call('GET', KEYS[4]))
  if not cutoff then
    cutoff = now
    redis.call('SET', KEYS[4], now)
  end
  if cutoff < now - ARGV[3] * 1000 then cutoff = now - ARGV[3] * 1000 end
  if tonumber(ARGV[11]) < cutoff then
    redis.call('DEL', KEYS[1])
    return 5
  end
end
local tat = tonumber(redis.call('GET', KEYS[2])) or now
if tat < now then tat = now end
local newTat = tat + ARGV[1]
local allowAt = newTat - ARGV[2]
if allowAt > now then
  redis.call('DEL', KEYS[1])
  return {3, math.ceil(allowAt - now)}
end
local backlog = redis.call('XLEN', KEYS[3])
if backlog >= tonumber(ARGV[4]) then
  redis.call('DEL', KEYS[1])
  return {4, backlog}
end
redis.call('XADD', KEYS[3], '*', ` + xaddFields() + `)
redis.call('SET', KEYS[2], newTat, 'PX', math.ceil((newTat - now) / 1000) + 1)
return 0
`

var enqueueScript = redis.NewScript(enqueueSrc)

// enqueueSHA is the script's SHA1, boxed once.
var enqueueSHA any = enqueueScript.Hash()

// knownSrc looks up the idempotency record of a vote admit refused, so
// that a known event answers as such whatever changed since it was
// accepted. KEYS[1] is the record, ARGV[1] the vote's "poll candidate". It
// answers replyAccepted when there is no record (nothing is written),
// replyReplay when the record holds the same payload (rewritten as it is,
// as enqueueSrc does, so that a WAIT after it also covers the original
// write) and replyConflict when it holds another.
const knownSrc = `
local known = redis.call('GET', KEYS[1])
if not known then
  return 0
end
if known == ARGV[1] then
  redis.call('SET', KEYS[1], known, 'KEEPTTL')
  return 1
end
return 2
`

// markEpochSrc sets the epoch KEYS[1] to Redis' time (µs) when it is
// absent, as enqueueSrc does on first use.
const markEpochSrc = `
if redis.call('EXISTS', KEYS[1]) == 0 then
  local t = redis.call('TIME')
  redis.call('SET', KEYS[1], t[1] * 1000000 + t[2])
end
return 0
`

// markEpochs sets every shard's epoch that is absent (a new or emptied
// Redis) when intake starts, rather than at the first vote of the shard,
// so that the principals created from then on count as holding all their
// records. It is best effort, beside serving: where Redis does not answer
// within Config.RedisTimeout and Config.RequestTimeout (the latter bounds
// how long it can hold up a shutdown), the script sets the epoch on first
// use.
func (s *Server) markEpochs(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, min(s.cfg.RedisTimeout, s.cfg.RequestTimeout))
	defer cancel()
	cmds, _ := s.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for shard := range s.keys.Shards() {
			pl.Eval(ctx, markEpochSrc, []string{s.keys.Epoch(shard)})
		}
		return nil
	})
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			s.log.LogAttrs(ctx, slog.LevelWarn, "could not mark the shards' epochs at start; the first votes will",
				slog.String("error", err.Error()))
			return
		}
	}
}

// The script's answers (see enqueueSrc).
const (
	replyAccepted = 0
	replyReplay   = 1
	replyConflict = 2
	replyLimited  = 3
	replyBacklog  = 4
	replyUnsure   = 5
)

// The script's arguments (ARGV indexes): first the four that are the same
// for every vote (scriptArgs.consts), then those that carry an entry's
// values.
const (
	argConsts      = 4
	argPrincipal   = 5
	argEventID     = 6
	argPoll        = 7
	argCandidate   = 8
	argFingerprint = 9
	argReceivedAt  = 10
	argCreatedAt   = 11
	argCheck       = 12
)

// ARGV[12]'s values, boxed once.
var (
	checkRecord any = "1" // an absent record is checked against the epoch
	skipCheck   any = "0" // the ledger said the event id is new
)

// scriptCmdLen is the length of a vote's whole command: EVALSHA, the SHA,
// the key count, the four keys and the arguments.
const scriptCmdLen = 7 + argCheck

// xaddFields is the field/value list of the script's XADD: the fields of
// stream.Entry.Values in its order, each value the script argument that
// carries it, the version the literal the stream package writes. It panics
// when the stream package has a field the script does not carry, which
// every test of intake would show.
func xaddFields() string {
	argOf := map[string]int{
		stream.FieldPrincipal:   argPrincipal,
		stream.FieldEventID:     argEventID,
		stream.FieldPoll:        argPoll,
		stream.FieldCandidate:   argCandidate,
		stream.FieldFingerprint: argFingerprint,
		stream.FieldReceivedAt:  argReceivedAt,
	}
	pairs := stream.Entry{}.Values()
	var b strings.Builder
	for i := 0; i < len(pairs); i += 2 {
		if i > 0 {
			b.WriteString(", ")
		}
		field := pairs[i]
		if field == stream.FieldVersion {
			fmt.Fprintf(&b, "%q, %q", field, pairs[i+1])
			continue
		}
		n, ok := argOf[field]
		if !ok {
			panic(fmt.Sprintf("intake: the enqueue script does not carry stream field %q", field))
		}
		fmt.Fprintf(&b, "%q, ARGV[%d]", field, n)
	}
	return b.String()
}

// scriptArgs are the arguments of the enqueue script that do not depend on
// the vote, boxed once: go-redis takes a command as []any, and a value
// boxed per vote would be an allocation per vote.
type scriptArgs struct {
	keys stream.Keys
	// consts are ARGV[1..4]: the GCRA emission interval and burst
	// tolerance (µs), the idempotency record's lifetime (ms) and the max
	// backlog.
	consts [argConsts]any
	// streamKeys and epochKeys are the stream and epoch keys by shard.
	streamKeys []any
	epochKeys  []any
}

func newScriptArgs(cfg Config, keys stream.Keys) scriptArgs {
	a := scriptArgs{keys: keys, consts: [argConsts]any{
		strconv.FormatFloat(1e6/cfg.Rate, 'f', 3, 64),
		strconv.FormatFloat(1e6/cfg.Rate*float64(cfg.Burst), 'f', 3, 64),
		strconv.FormatInt(cfg.IdempotencyWindow.Milliseconds(), 10),
		strconv.FormatInt(cfg.MaxBacklog, 10),
	}}
	for shard, k := range keys.Streams() {
		a.streamKeys = append(a.streamKeys, k)
		a.epochKeys = append(a.epochKeys, keys.Epoch(shard))
	}
	return a
}

// call returns a recycled scriptCall holding the whole command of the vote
// of v with clientEventID for choice c of poll; check says whether the
// script is to check that an absent record is conclusive (false once the
// ledger said the event id is new). The arguments that depend on the
// voter, poll or choice were boxed once with them; the others are pointers
// into the call (go-redis writes a *string or *int64 as its value), so a
// vote allocates only its idempotency key here.
func (a *scriptArgs) call(v *voter, clientEventID string, poll *pollInfo, c *choice, receivedAt time.Time, check bool) *scriptCall {
	call := calls.Get().(*scriptCall)
	call.key = v.idempotencyKey(a.keys, clientEventID)
	call.eventID = clientEventID
	call.receivedAt = receivedAt.UnixMicro()
	call.createdAt = v.CreatedAt.UnixMicro()
	checkArg := skipCheck
	if check {
		checkArg = checkRecord
	}
	args := append(call.argBuf[:0], "evalsha", enqueueSHA, 4, &call.key, v.rateKeyArg, a.streamKeys[v.shard], a.epochKeys[v.shard])
	args = append(args, a.consts[:]...)
	call.args = append(args, v.idArg, &call.eventID, poll.idArg, c.idArg, c.fingerprintArg, &call.receivedAt,
		&call.createdAt, checkArg)
	return call
}

// decodeEnqueue reads the answer of the enqueue script.
func decodeEnqueue(res any) (enqueueResult, error) {
	switch v := res.(type) {
	case int64:
		switch v {
		case replyAccepted:
			return enqueueResult{outcome: outAccepted}, nil
		case replyReplay:
			return enqueueResult{outcome: outReplay}, nil
		case replyConflict:
			return enqueueResult{outcome: outConflict}, nil
		case replyUnsure:
			return enqueueResult{outcome: outUnsure}, nil
		}
	case []any:
		if len(v) != 2 {
			break
		}
		kind, _ := v[0].(int64)
		n, ok := v[1].(int64)
		if !ok {
			break
		}
		switch kind {
		case replyLimited:
			return enqueueResult{outcome: outLimited, wait: time.Duration(n) * time.Microsecond}, nil
		case replyBacklog:
			return enqueueResult{outcome: outBacklog}, nil
		}
	}
	return enqueueResult{}, fmt.Errorf("enqueue script answered %v", res)
}
