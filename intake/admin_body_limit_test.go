package intake_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"tally/ledger"
)

// adminBodyLimit is the most an admin request's body may hold: 4 MiB.
const adminBodyLimit = 4 << 20

// TestAdminBodyOverLimit: a body of an admin write one byte over 4 MiB is
// refused 413 body-too-large naming the admin limit, whether the request
// declares its length or sends it chunked, and nothing is stored. Each
// body is a valid request, padded with JSON whitespace, that would be
// stored if it were read; a body of exactly 4 MiB is.
func TestAdminBodyOverLimit(t *testing.T) {
	t.Parallel()
	// The test is of the bound, not of latency: under -race beside other
	// work, reading and decoding 4 MiB passed the 3 s request timeout.
	b := setup(t, func(c *config) {
		c.RequestTimeout, c.WriteTimeout = time.Minute, time.Minute
	})
	b.client.Timeout = 2 * time.Minute
	_, admin := b.admin(t, "app")
	ctx := context.Background()
	before, err := b.store.Principals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// padded is head, spaces, tail: size bytes.
	padded := func(head, tail string, size int) []byte {
		return []byte(head + strings.Repeat(" ", size-len(head)-len(tail)) + tail)
	}
	bodies := map[string][]byte{
		"/v1/polls":      padded(`{"poll_id":"huge","title":"T",`, `"choices":["a"]}`, adminBodyLimit+1),
		"/v1/principals": padded(`{"names":["huge"`, `]}`, adminBodyLimit+1),
	}
	for path, body := range bodies {
		for _, chunked := range []bool{false, true} {
			req := b.request(t, http.MethodPost, path, admin, "application/json", body)
			what := "POST " + path + " of " + strconv.Itoa(len(body)) + " bytes with its Content-Length"
			if chunked {
				req.Body, req.ContentLength = io.NopCloser(io.MultiReader(bytes.NewReader(body))), -1
				what = "POST " + path + " of " + strconv.Itoa(len(body)) + " bytes, chunked"
			}
			r := b.send(t, req)
			if r.code != http.StatusRequestEntityTooLarge || r.str("type") != "urn:tally:problem:body-too-large" {
				t.Errorf("%s: %d %s, want 413 body-too-large", what, r.code, r.raw)
				continue
			}
			if d := r.str("detail"); !strings.Contains(d, strconv.Itoa(adminBodyLimit)) || !strings.Contains(d, "admin request") {
				t.Errorf("%s: detail %q, want one naming the admin request's limit of %d bytes", what, d, adminBodyLimit)
			}
		}
	}
	if _, err := b.store.Poll(ctx, "huge"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("the poll of a body over the limit: %v, want not found", err)
	}
	after, err := b.store.Principals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Errorf("%d principals before the bodies over the limit, %d after: want none added", len(before), len(after))
	}
	// At the limit the same body is read, and the poll made: the refusal
	// above is of the size alone.
	at := padded(`{"poll_id":"huge","title":"T",`, `"choices":["a"]}`, adminBodyLimit)
	if r := b.do(t, http.MethodPost, "/v1/polls", admin, "application/json", at); r.code != http.StatusCreated {
		t.Fatalf("POST /v1/polls of exactly %d bytes: %d %s, want 201", len(at), r.code, r.raw)
	}
}

// TestAdminWriteOutOfTimeReadingItsBody: an admin write whose request
// time runs out while its body is still coming is answered 503 saying
// so, not that the database did not answer; nothing is stored, and the
// next admin write is not refused as if PostgreSQL were down.
func TestAdminWriteOutOfTimeReadingItsBody(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	b := setup(t, func(c *config) { c.RequestTimeout = timeout })
	_, admin := b.admin(t, "app")
	body := `{"poll_id":"slow","title":"T","choices":["a","b"]}`
	pr, pw := io.Pipe()
	req := b.request(t, http.MethodPost, "/v1/polls", admin, "application/json", nil)
	req.Body, req.ContentLength = pr, int64(len(body))
	go func() {
		// Half the body, then the rest once the request's time is over.
		_, _ = io.WriteString(pw, body[:len(body)/2])
		time.Sleep(2 * timeout)
		_, _ = io.WriteString(pw, body[len(body)/2:])
		_ = pw.Close()
	}()
	r := b.send(t, req)
	if r.code != http.StatusServiceUnavailable || !strings.Contains(r.str("detail"), "time ran out") || strings.Contains(r.str("detail"), "did not answer") {
		t.Fatalf("an admin write whose time ran out reading its body: %d %s, want 503 saying its time ran out", r.code, r.raw)
	}
	if _, err := b.store.Poll(context.Background(), "slow"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("the poll of the write that ran out of time: %v, want not found", err)
	}
	if r := b.do(t, http.MethodPost, "/v1/polls", admin, "application/json", []byte(body)); r.code != http.StatusCreated {
		t.Fatalf("the same write sent again at once: %d %s, want 201", r.code, r.raw)
	}
}
