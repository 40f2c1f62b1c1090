package stream_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"tally/stream"
	"tally/vote"
)

func entry() stream.Entry {
	return stream.Entry{PrincipalID: "p-1", ClientEventID: "e_1", PollID: "lunch", CandidateID: "pizza",
		ReceivedAt: time.UnixMicro(1_790_000_000_123_456).UTC()}
}

// v1 is e in the field-per-part layout of version 1, with fingerprint fp.
func v1(e stream.Entry, fp string) map[string]any {
	return map[string]any{
		stream.FieldVersion: "1", stream.FieldPrincipal: e.PrincipalID, stream.FieldEventID: e.ClientEventID,
		stream.FieldPoll: e.PollID, stream.FieldCandidate: e.Answer(), stream.FieldFingerprint: fp,
		stream.FieldReceivedAt: strconv.FormatInt(e.ReceivedAt.UnixMicro(), 10),
	}
}

func fields(e stream.Entry) map[string]any {
	vs := stream.Values(e)
	return map[string]any{vs[0].(string): vs[1]}
}

func TestRoundTrip(t *testing.T) {
	ranked := entry()
	ranked.CandidateID, ranked.Ballot = "", `["a","b"]`
	for _, e := range []stream.Entry{entry(), ranked} {
		got, err := stream.Decode(fields(e))
		if err != nil {
			t.Fatal(err)
		}
		if got != e {
			t.Fatalf("decoded %+v, want %+v", got, e)
		}
	}
	if got, want := stream.Encode(entry()), "2 p-1 e_1 lunch 1790000000123456 pizza"; got != want {
		t.Fatalf("Encode = %q, want %q", got, want)
	}
	e := entry()
	if got := stream.AppendParts([]byte("x:"), e.PrincipalID, e.ClientEventID, e.PollID, e.ReceivedAt, e.Answer()); string(got) != "x:"+stream.Encode(e) {
		t.Fatalf("AppendParts = %q, want x: and Encode's", got)
	}
	long := strings.Repeat("b", 300) // past EncodeParts' buffer on the stack
	if got := stream.EncodeParts("p", "e", "q", e.ReceivedAt, long); got != "2 p e q 1790000000123456 "+long {
		t.Fatalf("EncodeParts of a long ballot = %.40q...", got)
	}
}

// An entry of version 1, as intake wrote them before the single field,
// still decodes: a stream that holds some at an upgrade is applied after
// it. Its fingerprint is checked.
func TestDecodeV1(t *testing.T) {
	e := entry()
	got, err := stream.Decode(v1(e, vote.FingerprintHex(e.PollID, e.Answer())))
	if err != nil || got != e {
		t.Fatalf("Decode of version 1: %+v, %v; want %+v", got, err, e)
	}
	_, err = stream.Decode(v1(e, vote.FingerprintHex(e.PollID, "sushi")))
	if !errors.Is(err, stream.ErrFingerprintMismatch) || !errors.Is(err, stream.ErrUndecodable) {
		t.Fatalf("Decode of version 1 with another payload's fingerprint: %v, want ErrFingerprintMismatch", err)
	}
}

func TestDecodeRefuses(t *testing.T) {
	good := stream.Encode(entry())
	for name, s := range map[string]string{
		"empty":          "",
		"version only":   "2",
		"future version": "3" + good[1:],
		"no ballot":      "2 p-1 e_1 lunch 1790000000123456",
		"two spaces":     "2 p-1  e_1 lunch 1790000000123456 pizza",
		"extra part":     good + " x",
		"trailing space": good + " ",
		"bad poll":       "2 p-1 e_1 lu/nch 1790000000123456 pizza",
		"long id":        "2 " + strings.Repeat("p", vote.MaxIDLen+1) + " e_1 lunch 1790000000123456 pizza",
		"bad ballot":     `2 p-1 e_1 lunch 1790000000123456 ["b","a"`,
		"bad time":       "2 p-1 e_1 lunch soon pizza",
		"zero time":      "2 p-1 e_1 lunch 0 pizza",
		"negative time":  "2 p-1 e_1 lunch -5 pizza",
		"signed time":    "2 p-1 e_1 lunch +5 pizza",
		"leading zero":   "2 p-1 e_1 lunch 05 pizza",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := stream.Decode(map[string]any{stream.FieldEntry: s}); !errors.Is(err, stream.ErrUndecodable) {
				t.Fatalf("Decode(%q) = %v, want ErrUndecodable", s, err)
			}
		})
	}
	if _, err := stream.Decode(map[string]any{stream.FieldEntry: 7}); !errors.Is(err, stream.ErrUndecodable) {
		t.Fatalf("Decode of a number = %v, want ErrUndecodable", err)
	}
	if _, err := stream.Decode(map[string]any{"junk": "x"}); !errors.Is(err, stream.ErrUndecodable) || !strings.Contains(err.Error(), stream.FieldEntry) {
		t.Fatalf("Decode of no known field = %v, want ErrUndecodable naming %q", err, stream.FieldEntry)
	}
}

func TestDecodeV1Refuses(t *testing.T) {
	e := entry()
	fp := vote.FingerprintHex(e.PollID, e.Answer())
	for name, mutate := range map[string]func(map[string]any){
		"no version":     func(m map[string]any) { delete(m, stream.FieldVersion) },
		"future version": func(m map[string]any) { m[stream.FieldVersion] = "3" },
		"no principal":   func(m map[string]any) { delete(m, stream.FieldPrincipal) },
		"bad poll":       func(m map[string]any) { m[stream.FieldPoll] = "a b" },
		"not a string":   func(m map[string]any) { m[stream.FieldCandidate] = 7 },
		"short fp":       func(m map[string]any) { m[stream.FieldFingerprint] = "abcd" },
		"upper-case fp":  func(m map[string]any) { m[stream.FieldFingerprint] = strings.ToUpper(fp) },
		"bad time":       func(m map[string]any) { m[stream.FieldReceivedAt] = "soon" },
		"zero time":      func(m map[string]any) { m[stream.FieldReceivedAt] = "0" },
	} {
		t.Run(name, func(t *testing.T) {
			m := v1(e, fp)
			mutate(m)
			if _, err := stream.Decode(m); !errors.Is(err, stream.ErrUndecodable) {
				t.Fatalf("Decode = %v, want ErrUndecodable", err)
			}
		})
	}
}

// Record is the poll and the ballot, so that two ballots of one poll, or
// one ballot of two polls, never share a record.
func TestRecord(t *testing.T) {
	if got := stream.Record("lunch", `["a","b"]`); got != `lunch ["a","b"]` {
		t.Fatalf("Record = %q", got)
	}
	if stream.Record("lunch", "a") == stream.Record("lunch", "b") || stream.Record("p1", "a") == stream.Record("p2", "a") {
		t.Fatal("records of different payloads are equal")
	}
}

// IdempotencyPrefix is what Idempotency puts before the client event id.
func TestIdempotencyPrefix(t *testing.T) {
	k, err := stream.NewKeys("tally", 8)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		p := fmt.Sprintf("p-%d", i)
		if got, want := k.IdempotencyPrefix(p)+"e-1", k.Idempotency(p, "e-1"); got != want {
			t.Fatalf("prefix + id = %q, Idempotency = %q", got, want)
		}
	}
}

// NewKeys: 0 shards is 1, 1 to 1024 are taken, others refused; an empty
// prefix is DefaultPrefix. ShardOf spreads principals over every shard
// and routes each to one in range.
func TestNewKeysShards(t *testing.T) {
	for _, tc := range []struct{ in, want int }{{0, 1}, {1, 1}, {2, 2}, {1024, 1024}} {
		k, err := stream.NewKeys("", tc.in)
		if err != nil || k.Shards() != tc.want || k.Prefix() != stream.DefaultPrefix {
			t.Errorf("NewKeys(\"\", %d): %d shards, prefix %q, %v; want %d shards of %q", tc.in, k.Shards(), k.Prefix(), err, tc.want, stream.DefaultPrefix)
		}
	}
	for _, n := range []int{-1, 1025} {
		if _, err := stream.NewKeys("tally", n); err == nil || !strings.Contains(err.Error(), "between 1 and 1024") {
			t.Errorf("NewKeys with %d shards: %v, want an error naming the range", n, err)
		}
	}
	for _, shards := range []int{1, 2, 3, 8} {
		k, err := stream.NewKeys("tally", shards)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int]int{}
		for i := range 1000 {
			sh := k.ShardOf("p-" + strconv.Itoa(i))
			if sh < 0 || sh >= shards {
				t.Fatalf("%d shards: principal p-%d routed to shard %d", shards, i, sh)
			}
			seen[sh]++
		}
		if len(seen) != shards {
			t.Errorf("%d shards: 1000 principals routed to %d of them: %v", shards, len(seen), seen)
		}
	}
}

func TestKeysShareTheShardTag(t *testing.T) {
	k, err := stream.NewKeys("tally", 8)
	if err != nil {
		t.Fatal(err)
	}
	tag := func(key string) string { return key[:strings.IndexByte(key, '}')+1] }
	for _, p := range []string{"alice", "bob", "p-0123", "zed"} {
		s := k.Stream(k.ShardOf(p))
		if tag(k.Idempotency(p, "e1")) != tag(s) || tag(k.RateLimit(p)) != tag(s) || tag(k.DeadLetter(k.ShardOf(p))) != tag(s) ||
			tag(k.Epoch(k.ShardOf(p))) != tag(s) {
			t.Errorf("keys of %s do not share the hash tag of %s", p, s)
		}
	}
	if _, err := stream.NewKeys("bad prefix", 1); err == nil {
		t.Error("NewKeys accepted a prefix with a space")
	}
}

// FuzzDecode checks that Decode never panics on an entry of the current
// encoding, that what it accepts holds valid parts, and that it encodes
// back to the same string: one encoding per entry.
func FuzzDecode(f *testing.F) {
	ranked := entry()
	ranked.CandidateID, ranked.Ballot = "", `["a","b"]`
	approve := entry()
	approve.CandidateID, approve.Ballot = "", `{"a":"yes","b":"no"}`
	for _, e := range []stream.Entry{entry(), ranked, approve} {
		f.Add(stream.Encode(e))
	}
	f.Add("2 a b c 1 d")
	f.Add("2 a b c -1 d")
	f.Add("2 a b c 1 d e")
	f.Add("1 a b c 1 d")
	f.Fuzz(func(t *testing.T, s string) {
		got, err := stream.Decode(map[string]any{stream.FieldEntry: s})
		if err != nil {
			if !errors.Is(err, stream.ErrUndecodable) {
				t.Fatalf("error %v does not wrap ErrUndecodable", err)
			}
			return
		}
		for _, id := range []string{got.PrincipalID, got.ClientEventID, got.PollID} {
			if !vote.ValidID(id) {
				t.Fatalf("accepted invalid id %q", id)
			}
		}
		if got.Ballot == "" && !vote.ValidID(got.CandidateID) || got.Ballot != "" && (got.CandidateID != "" || !vote.ValidCanonical(got.Ballot)) {
			t.Fatalf("accepted invalid ballot %+v", got)
		}
		if again := stream.Encode(got); again != s {
			t.Fatalf("%q decoded to %+v, which encodes to %q", s, got, again)
		}
	})
}

// FuzzDecodeV1 is FuzzDecode for entries of version 1.
func FuzzDecodeV1(f *testing.F) {
	e := entry()
	f.Add("1", e.PrincipalID, e.ClientEventID, e.PollID, e.CandidateID, vote.FingerprintHex(e.PollID, e.CandidateID), "1790000000123456")
	f.Add("1", "", "x", "y", "z", "00", "-1")
	f.Add("2", "a", "b", "c", "d", strings.Repeat("0", 64), "1")
	f.Fuzz(func(t *testing.T, v, principal, key, poll, cand, fp, rat string) {
		m := map[string]any{stream.FieldVersion: v, stream.FieldPrincipal: principal, stream.FieldEventID: key,
			stream.FieldPoll: poll, stream.FieldCandidate: cand, stream.FieldFingerprint: fp, stream.FieldReceivedAt: rat}
		got, err := stream.Decode(m)
		if err != nil {
			if !errors.Is(err, stream.ErrUndecodable) {
				t.Fatalf("error %v does not wrap ErrUndecodable", err)
			}
			return
		}
		for _, id := range []string{got.PrincipalID, got.ClientEventID, got.PollID} {
			if !vote.ValidID(id) {
				t.Fatalf("accepted invalid id %q", id)
			}
		}
		again, err := stream.Decode(fields(got))
		if err != nil || again != got {
			t.Fatalf("re-decoding %+v in the current encoding gave %+v, %v", got, again, err)
		}
	})
}
