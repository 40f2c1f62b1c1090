package cli

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"tally/audit"
	"tally/internal/testenv"
	"tally/ledger"
)

// tally log prove prints a receipt tally audit receipt accepts, and tally
// log consistency a proof it accepts between that receipt's checkpoint
// and a later one.
func TestLogProveAndConsistency(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.Postgres(t)
	store, err := ledger.New(db.Pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.CreatePoll(ctx, ledger.Poll{ID: "lunch", Title: "Lunch", Choices: []string{"pizza", "sushi"}}); err != nil {
		t.Fatal(err)
	}
	skey, vkey, err := audit.GenerateKey("tally.test")
	if err != nil {
		t.Fatal(err)
	}
	signer, err := audit.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "verifier.key")
	write(t, keyFile, vkey+"\n")
	vote := func(n int) (principal string) {
		t.Helper()
		var events []ledger.Event
		for range n {
			ps, err := store.AddPrincipals(ctx, []string{"voter"}, "")
			if err != nil {
				t.Fatal(err)
			}
			principal = ps[0].ID
			events = append(events, ledger.Event{PrincipalID: principal, ClientEventID: "e1", PollID: "lunch", CandidateID: "sushi", ReceivedAt: time.Now()})
		}
		if _, err := store.Append(ctx, events); err != nil {
			t.Fatal(err)
		}
		return principal
	}
	sign := func() string {
		t.Helper()
		h, err := store.Head(ctx, "lunch")
		if err != nil {
			t.Fatal(err)
		}
		note, err := audit.SignCheckpoint(signer, audit.Origin("tally.test", "lunch"), h.Size, h.Root)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.AddCheckpoint(ctx, "lunch", h.Size, h.Root, string(note)); err != nil {
			t.Fatal(err)
		}
		return string(note)
	}
	who := vote(3) // leaf 3: leaf 0 is the poll's definition
	prove := []string{"log", "prove", "--poll", "lunch", "--event-id", "e1", "--principal", who}
	if r := tally(t, db.URL, prove...); r.code != ExitCheck || !strings.Contains(r.stderr, "--log-key") {
		t.Fatalf("log prove before any checkpoint: %+v, want exit 1 saying how to get one", r)
	}
	sign()

	r := tally(t, db.URL, prove...)
	if r.code != ExitOK {
		t.Fatalf("log prove: %+v", r)
	}
	receipt := filepath.Join(dir, "receipt.json")
	write(t, receipt, r.stdout)
	if a := offline(t, "", "audit", "receipt", receipt, "--key", keyFile); a.code != ExitOK || !strings.Contains(a.stdout, "is leaf 3 of the tree of size 4") {
		t.Fatalf("audit receipt of tally log prove's receipt: %+v", a)
	}

	vote(2)
	later := filepath.Join(dir, "later.txt")
	write(t, later, sign())
	for _, to := range []string{"6", ""} {
		args := []string{"log", "consistency", "--poll", "lunch", "--from", "4"}
		if to != "" {
			args = append(args, "--to", to)
		}
		c := tally(t, db.URL, args...)
		if c.code != ExitOK {
			t.Fatalf("log consistency --to %q: %+v", to, c)
		}
		consistency := filepath.Join(dir, "consistency"+to+".json")
		write(t, consistency, c.stdout)
		if a := offline(t, "", "audit", "receipt", receipt, "--key", keyFile, "--checkpoint", later, "--consistency", consistency); a.code != ExitOK ||
			!strings.Contains(a.stdout, "later checkpoint (size 6) still holds") {
			t.Fatalf("audit receipt with tally log consistency --to %q's proof: %+v", to, a)
		}
	}

	// --size: against the signed checkpoint of that size, a receipt; at a
	// size none was signed at, the log's root with an empty checkpoint.
	if r := tally(t, db.URL, append(prove, "--size", "4")...); r.code != ExitOK || r.stdout != tally(t, db.URL, append(prove, "--size", "4")...).stdout {
		t.Fatalf("log prove --size 4: %+v", r)
	} else if rc, err := audit.ParseReceipt([]byte(r.stdout)); err != nil || rc.TreeSize != 4 {
		t.Fatalf("log prove --size 4: %v %s", err, r.stdout)
	}
	r = tally(t, db.URL, append(prove, "--size", "5")...)
	var unsigned map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &unsigned); r.code != ExitOK || err != nil ||
		unsigned["tree_size"] != float64(5) || unsigned["root"] == "" || unsigned["checkpoint"] != "" {
		t.Fatalf("log prove --size 5 (unsigned): %+v", r)
	}

	for name, c := range map[string]struct {
		args []string
		code int
	}{
		"size before the leaf":    {append(prove, "--size", "3"), ExitCheck},
		"size past the log":       {append(prove, "--size", "9"), ExitCheck},
		"unknown event":           {[]string{"log", "prove", "--poll", "lunch", "--event-id", "nope", "--principal", who}, ExitCheck},
		"another poll":            {[]string{"log", "prove", "--poll", "dinner", "--event-id", "e1", "--principal", who}, ExitCheck},
		"from past the log":       {[]string{"log", "consistency", "--poll", "lunch", "--from", "7"}, ExitCheck},
		"to past the log":         {[]string{"log", "consistency", "--poll", "lunch", "--from", "1", "--to", strconv.Itoa(9)}, ExitCheck},
		"from past to":            {[]string{"log", "consistency", "--poll", "lunch", "--from", "4", "--to", "3"}, ExitError},
		"from zero":               {[]string{"log", "consistency", "--poll", "lunch", "--from", "0"}, ExitError},
		"consistency, no poll":    {[]string{"log", "consistency", "--poll", "dinner", "--from", "1"}, ExitCheck},
		"from not a whole number": {[]string{"log", "consistency", "--poll", "lunch", "--from", "x"}, ExitError},
	} {
		// A flag that does not parse gets its usage on standard output too.
		if r := tally(t, db.URL, c.args...); r.code != c.code || r.stderr == "" || c.code == ExitCheck && r.stdout != "" {
			t.Errorf("%s: %+v, want exit %d with the reason on stderr", name, r, c.code)
		}
	}

	// A signed checkpoint that disagrees with the log (the log was changed
	// after it was signed; the table takes an INSERT): no receipt against it.
	vote(1)
	h, err := store.Head(ctx, "lunch")
	if err != nil {
		t.Fatal(err)
	}
	wrong := h.Root
	wrong[0] ^= 1
	note, err := audit.SignCheckpoint(signer, audit.Origin("tally.test", "lunch"), h.Size, wrong)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO poll_log_checkpoints (poll_id, size, root, checkpoint) VALUES ('lunch', $1, $2, $3)`,
		h.Size, wrong[:], string(note)); err != nil {
		t.Fatal(err)
	}
	for _, size := range []string{"", "7"} {
		args := prove
		if size != "" {
			args = append(slices.Clone(prove), "--size", size)
		}
		if r := tally(t, db.URL, args...); r.code != ExitCheck || r.stdout != "" || !strings.Contains(r.stderr, "the log changed after it was signed") {
			t.Errorf("log prove %v against a checkpoint that disagrees with the log: %+v, want exit 1 saying the log changed", args[len(prove):], r)
		}
	}
}
