package audit_test

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"tally/audit"
	"tally/vote"
)

// The example of docs/audit.md: an independent verifier can check its
// encoder against these bytes and this hash.
var (
	exampleLeaf = audit.Leaf{PollID: "lunch", CandidateID: "soup", PrincipalID: "p-7",
		ClientEventID: "e-1", ReceivedAt: time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)}
	exampleBytes = "01" + "056c756e6368" + "04736f7570" + "03702d37" + "03652d31" + "00064bf535b0f240"
	exampleHash  = "2a783ce69969a978190851e1a6c00616480dba92f4445497501d5dfe8e016a9f"
)

func TestLeafEncodingExample(t *testing.T) {
	b, err := audit.EncodeLeaf(nil, exampleLeaf)
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(b); got != exampleBytes {
		t.Fatalf("encoding\n got %s\nwant %s", got, exampleBytes)
	}
	h, err := audit.LeafHash(exampleLeaf)
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(h[:]); got != exampleHash {
		t.Fatalf("leaf hash\n got %s\nwant %s", got, exampleHash)
	}
}

func TestLeafRoundTrip(t *testing.T) {
	b, err := audit.EncodeLeaf(nil, exampleLeaf)
	if err != nil {
		t.Fatal(err)
	}
	l, err := audit.DecodeLeaf(b)
	if err != nil {
		t.Fatal(err)
	}
	if l != exampleLeaf {
		t.Fatalf("decoded %+v, want %+v", l, exampleLeaf)
	}
}

func TestLeafRefusals(t *testing.T) {
	good, _ := audit.EncodeLeaf(nil, exampleLeaf)
	for _, tc := range []struct {
		name string
		leaf audit.Leaf
		want string
	}{
		{"empty poll", audit.Leaf{CandidateID: "a", PrincipalID: "p", ClientEventID: "e", ReceivedAt: time.Now()}, "poll_id"},
		{"long id", audit.Leaf{PollID: strings.Repeat("x", 65), CandidateID: "a", PrincipalID: "p", ClientEventID: "e", ReceivedAt: time.Now()}, "poll_id"},
		{"bad char", audit.Leaf{PollID: "p", CandidateID: "a b", PrincipalID: "p", ClientEventID: "e", ReceivedAt: time.Now()}, "candidate_id"},
		{"no time", audit.Leaf{PollID: "p", CandidateID: "a", PrincipalID: "p", ClientEventID: "e"}, "received_at"},
	} {
		if _, err := audit.EncodeLeaf(nil, tc.leaf); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %s", tc.name, err, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		b    []byte
		says string
	}{
		{"empty", nil, "leaf: empty"},
		{"version 2", append([]byte{2}, good[1:]...), "version 2 is not known"},
		{"cut", good[:len(good)-1], "received_at takes 8 bytes, 7 are left"},
		{"no time", good[:len(good)-8], "received_at takes 8 bytes, 0 are left"}, // the last id ends the bytes
		{"last id cut", good[:len(good)-9], "client_event_id is cut short"},
		{"trailing", append(append([]byte{}, good...), 0), "received_at takes 8 bytes, 9 are left"},
		{"length past end", []byte{1, 60, 'a'}, "poll_id is cut short"},
		{"zero-length id", append([]byte{1, 0}, good[7:]...), `poll_id "" is invalid`},
	} {
		if _, err := audit.DecodeLeaf(tc.b); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.says)
		}
	}
}

// LeafHash, which rebuild and the offline audit run for every row,
// allocates nothing, even for ids of the longest length.
func TestLeafHashAllocatesNothing(t *testing.T) {
	long := strings.Repeat("x", vote.MaxIDLen)
	l := audit.Leaf{PollID: long, CandidateID: long, PrincipalID: long, ClientEventID: long, ReceivedAt: exampleLeaf.ReceivedAt}
	if n := testing.AllocsPerRun(100, func() {
		if _, err := audit.LeafHash(l); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("LeafHash of a leaf of %d-character ids: %v allocations, want 0", vote.MaxIDLen, n)
	}
}

func FuzzDecodeLeaf(f *testing.F) {
	good, _ := audit.EncodeLeaf(nil, exampleLeaf)
	f.Add(good)
	f.Add([]byte{1})
	ballot, _ := audit.EncodeLeaf(nil, exampleBallotLeaf)
	f.Add(ballot)
	for _, b := range []string{`["a","b"]`, `["b","a"]`, `{"a":"yes","b":"no"}`, `[]`, `{}`} {
		l := exampleBallotLeaf
		l.Ballot = b
		enc, _ := audit.EncodeLeaf(nil, l)
		f.Add(enc)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := audit.DecodeLeaf(b)
		if err != nil {
			return
		}
		again, err := audit.EncodeLeaf(nil, l)
		if err != nil {
			t.Fatalf("decoded leaf %+v does not encode: %v", l, err)
		}
		if string(again) != string(b) {
			t.Fatalf("decode then encode changed the bytes:\n%x\n%x", b, again)
		}
	})
}
