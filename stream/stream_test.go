package stream_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"tally/vote"

	"tally/stream"
)

func entry() stream.Entry {
	return stream.Entry{PrincipalID: "p-1", ClientEventID: "e_1", PollID: "lunch", CandidateID: "pizza",
		Fingerprint: strings.Repeat("ab", 32), ReceivedAt: time.UnixMicro(1_790_000_000_123_456).UTC()}
}

func toMap(values []string) map[string]any {
	m := map[string]any{}
	for i := 0; i+1 < len(values); i += 2 {
		m[values[i]] = values[i+1]
	}
	return m
}

func TestRoundTrip(t *testing.T) {
	e := entry()
	got, err := stream.Decode(toMap(e.Values()))
	if err != nil {
		t.Fatal(err)
	}
	if got != e {
		t.Fatalf("decoded %+v, want %+v", got, e)
	}
}

func TestDecodeRefuses(t *testing.T) {
	for name, mutate := range map[string]func(map[string]any){
		"no version":     func(m map[string]any) { delete(m, stream.FieldVersion) },
		"future version": func(m map[string]any) { m[stream.FieldVersion] = "2" },
		"no principal":   func(m map[string]any) { delete(m, stream.FieldPrincipal) },
		"bad poll":       func(m map[string]any) { m[stream.FieldPoll] = "a b" },
		"not a string":   func(m map[string]any) { m[stream.FieldCandidate] = 7 },
		"short fp":       func(m map[string]any) { m[stream.FieldFingerprint] = "abcd" },
		"long fp":        func(m map[string]any) { m[stream.FieldFingerprint] = strings.Repeat("ab", 32) + "0" },
		"upper-case fp":  func(m map[string]any) { m[stream.FieldFingerprint] = strings.Repeat("AB", 32) },
		"fp of g":        func(m map[string]any) { m[stream.FieldFingerprint] = strings.Repeat("0g", 32) },
		"fp of /":        func(m map[string]any) { m[stream.FieldFingerprint] = strings.Repeat("0/", 32) },
		"fp of :":        func(m map[string]any) { m[stream.FieldFingerprint] = strings.Repeat("0:", 32) },
		"fp of `":        func(m map[string]any) { m[stream.FieldFingerprint] = strings.Repeat("0`", 32) },
		"bad time":       func(m map[string]any) { m[stream.FieldReceivedAt] = "soon" },
		"zero time":      func(m map[string]any) { m[stream.FieldReceivedAt] = "0" },
	} {
		t.Run(name, func(t *testing.T) {
			m := toMap(entry().Values())
			mutate(m)
			if _, err := stream.Decode(m); !errors.Is(err, stream.ErrUndecodable) {
				t.Fatalf("Decode = %v, want ErrUndecodable", err)
			}
		})
	}
}

// A fingerprint of the boundary digits of each range (0 and 9, a and f)
// decodes.
func TestDecodeFingerprintDigits(t *testing.T) {
	e := entry()
	e.Fingerprint = strings.Repeat("09af", 16)
	if got, err := stream.Decode(toMap(e.Values())); err != nil || got != e {
		t.Fatalf("Decode of fingerprint %s: %+v, %v", e.Fingerprint, got, err)
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

// FuzzDecode checks that Decode never panics and that what it accepts
// encodes back to the same entry.
func FuzzDecode(f *testing.F) {
	e := entry()
	f.Add("1", e.PrincipalID, e.ClientEventID, e.PollID, e.CandidateID, e.Fingerprint, "1790000000123456")
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
		for _, id := range []string{got.PrincipalID, got.ClientEventID, got.PollID, got.CandidateID} {
			if !vote.ValidID(id) {
				t.Fatalf("accepted invalid id %q", id)
			}
		}
		again, err := stream.Decode(toMap(got.Values()))
		if err != nil || again != got {
			t.Fatalf("re-decoding %+v gave %+v, %v", got, again, err)
		}
	})
}
