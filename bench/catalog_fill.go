package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"tally/credential"
	"tally/ledger"
)

// This file owns how the catalog measurement (catalog.go) fills a
// catalog: its revoked principals (one statement), its polls in bulk over
// HTTP and through tally poll create --from (both timed: the bulk rates),
// and its polls with eligibility lists (ledger.Store.EnsurePolls).

// catalogShape is what one size of the catalog holds.
type catalogShape struct {
	polls        int // polls of 2 or 3 choices open to any principal
	fromCLI      int // of polls, made by tally poll create --from; the rest by POST /v1/polls with arrays
	listPolls    int // polls with an eligibility list, beside polls
	listEligible int // principals on each list
	revoked      int // revoked principals
}

func shapeOf(polls int) catalogShape {
	return catalogShape{polls: polls, fromCLI: polls / 10, listPolls: 10, listEligible: polls, revoked: polls}
}

func (s catalogShape) String() string {
	return fmt.Sprintf("%s polls, %s eligibility rows (%d lists of %s), %s revoked principals",
		count(s.polls), count(s.listPolls*s.listEligible), s.listPolls, count(s.listEligible), count(s.revoked))
}

// catalogPollID is the id of the i-th poll of the catalog.
func catalogPollID(i int) string { return "c" + itoa(i) }

// addRevoked adds n principals named "revoked", ledger.MaxPrincipalsPerAdd
// at a time, and revokes them all in one statement.
func (c *catalogRun) addRevoked(ctx context.Context, n int) error {
	for done := 0; done < n; {
		k := min(n-done, ledger.MaxPrincipalsPerAdd)
		names := make([]string, k)
		for i := range names {
			names[i] = "revoked"
		}
		if _, err := c.store.AddPrincipals(ctx, names, ledger.RoleVoter); err != nil {
			return fmt.Errorf("add the principals to revoke: %w", err)
		}
		done += k
	}
	_, err := c.pool.Exec(ctx, `UPDATE principals SET revoked_at = now() WHERE name = 'revoked'`)
	return err
}

// bulkHTTP creates polls first..last-1 at addr with POST /v1/polls of
// arrays of ledger.MaxPollsPerCreate, one request after the other, and
// returns polls/s.
func (c *catalogRun) bulkHTTP(ctx context.Context, addr string, first, last int) (float64, error) {
	start := time.Now()
	for i := first; i < last; i += ledger.MaxPollsPerCreate {
		ids := make([]string, 0, ledger.MaxPollsPerCreate)
		for j := i; j < min(last, i+ledger.MaxPollsPerCreate); j++ {
			ids = append(ids, catalogPollID(j))
		}
		if err := c.client.createPolls(ctx, addr, ids); err != nil {
			return 0, err
		}
	}
	return float64(last-first) / time.Since(start).Seconds(), nil
}

// bulkCLI creates polls first..last-1 with tally poll create --from FILE
// and returns polls/s, the process's start included.
func (c *catalogRun) bulkCLI(ctx context.Context, first, last int) (float64, error) {
	file := filepath.Join(c.e.tmp, "catalog-polls.jsonl")
	var b bytes.Buffer
	for i := first; i < last; i++ {
		line, _ := json.Marshal(catalogPoll(catalogPollID(i), i, nil))
		b.Write(line)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(file, b.Bytes(), 0o600); err != nil {
		return 0, err
	}
	defer os.Remove(file)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(cctx, c.e.tally, "poll", "create", "--from", file, "--database-url", c.url).CombinedOutput()
	took := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("tally poll create --from: %w\n%s", err, lastLines(out, 5))
	}
	if made := bytes.Count(out, []byte(" created\n")); made != last-first {
		return 0, fmt.Errorf("tally poll create --from created %d of %d polls:\n%s", made, last-first, lastLines(out, 5))
	}
	return float64(last-first) / took.Seconds(), nil
}

// addListPolls creates the shape's polls with eligibility lists, "e0" on,
// each listing principals of its own, in one ledger.Store.EnsurePolls.
func (c *catalogRun) addListPolls(ctx context.Context, s catalogShape) error {
	if s.listPolls == 0 {
		return nil
	}
	polls := make([]ledger.Poll, s.listPolls)
	for i := range polls {
		eligible := make([]string, s.listEligible)
		for j := range eligible {
			eligible[j] = fmt.Sprintf("p-%024x", i*s.listEligible+j)
		}
		polls[i] = ledger.Poll{ID: "e" + itoa(i), Title: "listed poll " + itoa(i), Choices: []string{"a", "b"}, Eligible: eligible}
	}
	out, err := c.store.EnsurePolls(ctx, polls)
	if err != nil {
		return fmt.Errorf("create the polls with eligibility lists: %w", err)
	}
	for i, o := range out {
		if o.Err != nil || !o.Created {
			return fmt.Errorf("create poll %s with its eligibility list: created %v: %v", polls[i].ID, o.Created, o.Err)
		}
	}
	return nil
}

// issueTokens returns an Authorization header for each of ps, signed by
// key.
func issueTokens(key credential.Key, ps []ledger.Principal) ([]string, error) {
	out := make([]string, len(ps))
	for i, p := range ps {
		role := credential.RoleVoter
		if p.Role == ledger.RoleAdmin {
			role = credential.RoleAdmin
		}
		tok, err := key.IssueRole(p.ID, role, p.CreatedAt, time.Time{})
		if err != nil {
			return nil, err
		}
		out[i] = "Bearer " + tok
	}
	return out, nil
}

// lastLines is the last n lines of out.
func lastLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
