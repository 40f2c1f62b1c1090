package ledger_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/mod/sumdb/tlog"

	"tally/audit"
	"tally/ledger"
)

// signHead signs h with a key named "test" and stores it, as the projector
// does.
func signHead(t *testing.T, b bundle, h ledger.LogHead) string {
	t.Helper()
	skey, _ := testKey(t)
	signer, err := audit.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	note, err := audit.SignCheckpoint(signer, audit.Origin(signer.Name(), h.PollID), h.Size, h.Root)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.store.AddCheckpoint(b.ctx, h.PollID, h.Size, h.Root, string(note)); err != nil {
		t.Fatalf("add checkpoint of %+v: %v", h, err)
	}
	return string(note)
}

// testKeys is the signer and verifier key of the tests' log.
var testKeys = sync.OnceValues(func() ([2]string, error) {
	s, v, err := audit.GenerateKey("test")
	return [2]string{s, v}, err
})

func testKey(t *testing.T) (string, string) {
	t.Helper()
	k, err := testKeys()
	if err != nil {
		t.Fatal(err)
	}
	return k[0], k[1]
}

func unsigned(t *testing.T, b bundle) map[string]ledger.LogHead {
	t.Helper()
	heads, err := b.store.UnsignedHeads(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]ledger.LogHead{}
	for _, h := range heads {
		m[h.PollID] = h
	}
	return m
}

// A head is listed as unsigned once it grew past its latest checkpoint,
// and no longer once that size is signed. A new poll's is, at size 1: its
// definition is signed before any vote.
func TestUnsignedHeadsFollowCheckpoints(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll(t, "p1", "a", "b")
	b.poll(t, "p2", "a", "b")
	b.poll(t, "empty", "a")
	if got := unsigned(t, b); len(got) != 3 || got["p1"].Size != 1 || got["empty"].Size != 1 {
		t.Fatalf("unsigned heads before any vote: %+v, want the three definitions", got)
	}
	if _, err := b.store.LatestCheckpoint(b.ctx, "empty"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("latest checkpoint of a poll with none: %v, want ErrNotFound", err)
	}
	signHead(t, b, unsigned(t, b)["empty"])
	appendN := func(poll string, from, n int) {
		t.Helper()
		var batch []ledger.Event
		for i := from; i < from+n; i++ {
			batch = append(batch, ev(fmt.Sprintf("%s-u%d", poll, i), "k", poll, "a"))
		}
		if _, err := b.store.Append(b.ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	appendN("p1", 0, 3)
	appendN("p2", 0, 2)
	got := unsigned(t, b)
	if len(got) != 2 || got["p1"].Size != 4 || got["p2"].Size != 3 {
		t.Fatalf("unsigned heads after votes: %+v, want p1 at 4 and p2 at 3", got)
	}
	for _, p := range []string{"p1", "p2"} {
		head, err := b.store.Head(b.ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if got[p] != head {
			t.Errorf("unsigned head %+v, the stored head is %+v", got[p], head)
		}
	}
	note := signHead(t, b, got["p1"])
	// Signing the same head again (a second projector) is fine.
	signHead(t, b, got["p1"])
	if got := unsigned(t, b); len(got) != 1 || got["p2"].Size != 3 {
		t.Fatalf("unsigned heads after p1 was signed: %+v, want p2 only", got)
	}
	latest, err := b.store.LatestCheckpoint(b.ctx, "p1")
	if err != nil {
		t.Fatal(err)
	}
	if latest.Size != 4 || latest.Note != note || latest.Root != got["p1"].Root {
		t.Fatalf("latest checkpoint of p1: %+v, want size 4 with the note signed", latest)
	}
	appendN("p1", 3, 2)
	again := unsigned(t, b)
	if len(again) != 2 || again["p1"].Size != 6 {
		t.Fatalf("unsigned heads after p1 grew: %+v, want p1 at 6 and p2", again)
	}
	signHead(t, b, again["p1"])
	signHead(t, b, again["p2"])
	if got := unsigned(t, b); len(got) != 0 {
		t.Fatalf("unsigned heads after all were signed: %+v", got)
	}
	var sizes []string
	err = b.store.Checkpoints(b.ctx, "", func(c ledger.Checkpoint) error {
		sizes = append(sizes, fmt.Sprintf("%s/%d", c.PollID, c.Size))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if s := strings.Join(sizes, " "); s != "empty/1 p1/4 p1/6 p2/3" {
		t.Fatalf("checkpoints %s, want empty/1 p1/4 p1/6 p2/3 in (poll, size) order", s)
	}
}

// A checkpoint of a tree the log does not hold is refused: larger than
// the head, another root at the head's size, another root at a stored
// size; an unknown poll is not found.
func TestAddCheckpointRefusesTreesTheLogDoesNotHold(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll(t, "p", "a")
	if _, err := b.store.Append(b.ctx, []ledger.Event{ev("u1", "k", "p", "a"), ev("u2", "k", "p", "a")}); err != nil {
		t.Fatal(err)
	}
	head, err := b.store.Head(b.ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	signHead(t, b, head)
	var other tlog.Hash
	other[0] = 1
	for _, c := range []struct {
		name string
		poll string
		size int64
		root tlog.Hash
		want error
	}{
		{"past the head", "p", 4, head.Root, ledger.ErrInvalid},
		{"another root at a stored size", "p", 3, other, ledger.ErrInvalid},
		{"unknown poll", "nopoll", 1, head.Root, ledger.ErrNotFound},
	} {
		if err := b.store.AddCheckpoint(b.ctx, c.poll, c.size, c.root, "note"); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	if _, err := b.store.Append(b.ctx, []ledger.Event{ev("u3", "k", "p", "a")}); err != nil {
		t.Fatal(err)
	}
	if err := b.store.AddCheckpoint(b.ctx, "p", 4, other, "note"); !errors.Is(err, ledger.ErrInvalid) {
		t.Errorf("another root at the head's size: got %v, want ErrInvalid", err)
	}
	n := 0
	if err := b.store.Checkpoints(b.ctx, "p", func(ledger.Checkpoint) error { n++; return nil }); err != nil || n != 1 {
		t.Fatalf("%d checkpoints stored (%v), want the one signed", n, err)
	}
}

// The database refuses to change or remove a checkpoint, as it refuses to
// change the ledger.
func TestCheckpointsAreAppendOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.poll(t, "p", "a")
	if _, err := b.store.Append(b.ctx, []ledger.Event{ev("u1", "k", "p", "a")}); err != nil {
		t.Fatal(err)
	}
	head, err := b.store.Head(b.ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	note := signHead(t, b, head)
	for _, stmt := range []string{
		`UPDATE poll_log_checkpoints SET checkpoint = 'forged'`,
		`DELETE FROM poll_log_checkpoints`,
		`TRUNCATE poll_log_checkpoints`,
	} {
		_, err := b.db.Pool.Exec(b.ctx, stmt)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" || !strings.Contains(pgErr.Message, "append-only") {
			t.Errorf("%s: got %v, want the append-only refusal (42501)", stmt, err)
		}
	}
	latest, err := b.store.LatestCheckpoint(b.ctx, "p")
	if err != nil || latest.Note != note {
		t.Fatalf("checkpoint after the refused statements: %+v (%v), want the note signed", latest, err)
	}
}
