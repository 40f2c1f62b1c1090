package intake

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"tally/stream"
)

// This file owns the enqueue script: its source, its argument layout (which
// ARGV carries what, and how a vote's arguments are laid out in its
// scriptCall) and the contract of its reply (decodeEnqueue).

// enqueueSrc decides the votes of one shard that share a pipeline, in
// their order, each as if it ran alone: one call per shard and pipeline
// spares Redis a script call per vote. Every key carries the shard's hash
// tag, so a call is valid on a Redis Cluster too.
//
//	KEYS[1] the shard's stream, KEYS[2] the shard's epoch (string), then
//	for the i-th vote KEYS[1+2i] its idempotency record (string) and
//	KEYS[2+2i] its principal's rate-limit bucket (string)
//	ARGV[1] emission interval in microseconds (1e6 / rate), ARGV[2] burst
//	tolerance in microseconds, ARGV[3] record lifetime in milliseconds,
//	ARGV[4] max backlog, then argsPerVote for each vote, from
//	ARGV[4+4(i-1)+1]: its idempotency record's value (stream.Record), its
//	stream entry (stream.Encode), the principal's created_at (µs since the
//	epoch), "1" to check that an absent record is conclusive, "0" once the
//	ledger said the event id is new
//
// It answers an array with one reply per vote, in their order: a small
// integer, which go-redis reads without allocating, or a pair for the
// rare refusals:
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
//	                             ledger, then run again with the check "0"
//
// The idempotency record is a string, stream.Record's, written with its
// lifetime by the same SET NX GET that looks it up, so a new vote costs one
// call for both. A vote that is then refused deletes it again, within the
// script, so nobody ever sees it. A vote whose absent record would not be
// conclusive (see below) only looks it up, with a GET. The lookup goes
// through pcall so that its error (a Redis before 7.0 has no SET ... NX
// GET) is that vote's reply, as Redis gave it, which enqueue recognizes.
//
// An absent record is conclusive (the event id is new for the principal)
// only if every event of the principal still has its record. A record
// lives ARGV[3] after its vote; the shard's epoch (KEYS[2], set here when
// absent, on Redis' clock) says since when this Redis holds records, and is
// lost with them. So every event received before max(now - window, epoch)
// may have lost its record, and none after: a principal created at or
// after that cutoff has no such event, and any other is answered unsure.
//
// The rate limit is GCRA on Redis' clock: the bucket key holds the
// theoretical arrival time (µs) and expires once it is in the past. Only an
// accepted vote moves it.
//
// Redis' clock, the cutoff and the stream's length are read once per call,
// when a vote first needs them: nothing else runs during the call, so the
// votes are decided as one call per vote within the same microsecond
// would decide them, and the length counts the call's own XADDs.
//
// The XADD writes one field, stream.FieldEntry, whose value the script
// stores as it is: the stream package encodes the entry, and the script
// knows nothing of its layout.
var enqueueSrc = `
local time, cutoff, backlog
local function clock()
  if not time then
    local t = redis.call('TIME')
    time = t[1] * 1000000 + t[2]
  end
  return time
end
local function epochCutoff()
  if not cutoff then
    cutoff = tonumber(redis.call('GET', KEYS[2]))
    if not cutoff then
      cutoff = clock()
      redis.call('SET', KEYS[2], cutoff)
    end
    local window = clock() - ARGV[3] * 1000
    if cutoff < window then cutoff = window end
  end
  return cutoff
end
local function vote(record, bucket, a)
  local entry = ARGV[a + ` + strconv.Itoa(argRecord) + `]
  local known
  if ARGV[a + ` + strconv.Itoa(argCheck) + `] == '1' and tonumber(ARGV[a + ` + strconv.Itoa(argCreatedAt) + `]) < epochCutoff() then
    known = redis.pcall('GET', record)
    if not known then
      return 5
    end
  else
    known = redis.pcall('SET', record, entry, 'NX', 'GET', 'PX', ARGV[3])
  end
  if type(known) == 'table' then
    return known
  end
  if known then
    if known == entry then
      redis.call('SET', record, known, 'KEEPTTL')
      return 1
    end
    return 2
  end
  local now = clock()
  local tat = tonumber(redis.call('GET', bucket)) or now
  if tat < now then tat = now end
  local newTat = tat + ARGV[1]
  local allowAt = newTat - ARGV[2]
  if allowAt > now then
    redis.call('DEL', record)
    return {3, math.ceil(allowAt - now)}
  end
  if not backlog then backlog = redis.call('XLEN', KEYS[1]) end
  if backlog >= tonumber(ARGV[4]) then
    redis.call('DEL', record)
    return {4, backlog}
  end
  redis.call('XADD', KEYS[1], '*', '` + stream.FieldEntry + `', ARGV[a + ` + strconv.Itoa(argEntry) + `])
  backlog = backlog + 1
  redis.call('SET', bucket, newTat, 'PX', math.ceil((newTat - now) / 1000) + 1)
  return 0
end
local replies = {}
for i = 1, (#KEYS - 2) / 2 do
  replies[i] = vote(KEYS[1 + 2 * i], KEYS[2 + 2 * i], ` + strconv.Itoa(argConsts) + ` + (i - 1) * ` + strconv.Itoa(argsPerVote) + `)
end
return replies
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

// The script's arguments: first the argConsts that are the same for every
// vote (scriptArgs.consts), then argsPerVote for each vote, at these
// offsets from the vote's first.
const (
	argConsts    = 4
	argRecord    = 1
	argEntry     = 2
	argCreatedAt = 3
	argCheck     = 4
	argsPerVote  = argCheck
)

// The check argument's values, boxed once.
var (
	checkRecord any = "1" // an absent record is checked against the epoch
	skipCheck   any = "0" // the ledger said the event id is new
)

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

// call returns a recycled scriptCall holding the keys and arguments of the
// vote of v with clientEventID for choice c of poll; check says whether the
// script is to check that an absent record is conclusive (false once the
// ledger said the event id is new). The arguments that depend on the
// poll or choice were boxed once with them; the others are pointers into
// the voter or the call (go-redis writes a *string, *int64 or
// *argBytes as its value), and the idempotency key and the entry are
// written into the call's own buffer, so a vote allocates nothing here.
func (a *scriptArgs) call(v *voter, clientEventID string, poll *pollInfo, c *choice, receivedAt time.Time, check bool) *scriptCall {
	call := calls.Get().(*scriptCall)
	call.script = a
	call.shard = v.shard
	b := append(append(call.buf[:0], v.idemPrefix...), clientEventID...)
	n := len(b)
	b = stream.AppendParts(b, v.ID, clientEventID, poll.poll.ID, receivedAt, c.answer)
	call.buf, call.key, call.entry = b, argBytes(b[:n:n]), argBytes(b[n:])
	call.createdAt = v.CreatedAt.UnixMicro()
	checkArg := skipCheck
	if check {
		checkArg = checkRecord
	}
	call.keyArgs = [2]any{&call.key, &v.rateKey}
	call.voteArgs = [argsPerVote]any{c.recordArg, &call.entry, &call.createdAt, checkArg}
	return call
}

// argBytes is an argument of a command written as its bytes: go-redis
// writes an encoding.BinaryMarshaler's bytes as they are, and a pointer
// to one is boxed without an allocation.
type argBytes []byte

// MarshalBinary is a's bytes, not a copy: go-redis writes them before
// the call that holds them is recycled.
func (a *argBytes) MarshalBinary() ([]byte, error) { return *a, nil }

// command is the EVALSHA command that decides votes, calls of one shard
// (and one scriptArgs), in their order.
func (a *scriptArgs) command(votes []*scriptCall) []any {
	n := len(votes)
	shard := votes[0].shard
	args := make([]any, 0, 5+2*n+argConsts+argsPerVote*n)
	args = append(args, "evalsha", enqueueSHA, 2+2*n, a.streamKeys[shard], a.epochKeys[shard])
	for _, c := range votes {
		args = append(args, c.keyArgs[:]...)
	}
	args = append(args, a.consts[:]...)
	for _, c := range votes {
		args = append(args, c.voteArgs[:]...)
	}
	return args
}

// decodeEnqueue reads the enqueue script's reply to one vote.
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
