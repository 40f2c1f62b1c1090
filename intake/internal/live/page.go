package live

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"tally/intake/internal/problem"
	"tally/ledger"
	"tally/vote"
)

// This file owns GET /polls/{poll_id}: the live results page, one HTML
// document rendered on the server with the figures at load (it reads
// right without JavaScript), its style and a small script inline, nothing
// fetched from elsewhere. The script keeps the figures current from the
// poll's live stream (live.go). Who may see the page is decided by
// viewablePoll, as for the stream.

var (
	//go:embed templates/page.html
	pageHTML string
	//go:embed templates/page.css
	pageCSS string
	//go:embed templates/page.js
	pageJS string

	pageTemplate = template.Must(template.New("page").Parse(pageHTML))
	// pageCSP allows the page's one inline script by its hash and nothing
	// else to run; the style element and the bars' widths are inline
	// styles, and the stream is fetched from intake itself.
	pageCSP = "default-src 'none'; script-src 'sha256-" + sha256Base64(pageJS) + "'; style-src 'unsafe-inline'; " +
		"connect-src 'self'; img-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

func sha256Base64(s string) string {
	sum := sha256.Sum256([]byte(s))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// pageData is what the page template renders.
type pageData struct {
	PollID   string
	Title    string
	State    string // open, opens at, open until, closed at
	ClosesAt string // RFC 3339, for a poll still open that closes; "" otherwise
	Closed   bool   // the poll is closed, and its log says so
	LivePath string // the poll's live stream
	// Kind is the poll's ballot kind, which decides what each choice
	// shows; MaxScore a score poll's max_score, the scale of its bars.
	Kind     string
	MaxScore int
	Choices  []pageChoice // ranked: by Borda count, highest first
	// Condorcet is a ranked poll's line on its Condorcet winner.
	Condorcet string
	Total     int64
	Ballots   int64
	AsOf      string // for people, UTC
	AsOfISO   string // RFC 3339
	Stale     bool
	TreeSize  int64
	// Checkpoint is the size of the latest signed checkpoint; 0: none.
	Checkpoint int64
	CSS        template.CSS
	JS         template.JS
}

// pageChoice is one choice as the page shows it: its votes and their
// share (single: of the votes; multiple: of the ballots), and the figures
// of its poll's kind.
type pageChoice struct {
	ID    string
	Votes int64
	Share string // "42.9%"
	Width string // the bar's CSS width: the share; score: the mean's of max_score; ranked: the Borda count's of the highest
	// approve: the marks, and the widths of their stacked bars (shares
	// of the choice's marks).
	Yes, No, Abstain                int64
	YesWidth, NoWidth, AbstainWidth string
	Mean                            string // score: score / votes, two decimals
	Borda                           int64  // ranked
}

// Page answers the poll's live results page, or 404 as for an unknown
// poll to whoever may not see its results.
func (lv *Live) Page(w http.ResponseWriter, r *http.Request) {
	id, ok := problem.PathID(w, r, "poll_id", "poll id")
	if !ok {
		return
	}
	poll, _, ok := lv.viewablePoll(w, r, id)
	if !ok {
		return
	}
	res, stale, err := lv.reads.Results(r.Context(), id)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		problem.WriteUnknownPoll(w, id)
		return
	case err != nil:
		lv.reads.LedgerFailed(w, r, "results lookup for the live page failed", err)
		return
	}
	cp, err := lv.checkpoints.size(r.Context(), id)
	if err != nil && !lv.reads.Skipped(err) {
		// The page still serves the figures; only the checkpoint is left out.
		lv.log.LogAttrs(r.Context(), slog.LevelWarn, "checkpoint lookup for the live page failed",
			slog.String("route", r.Pattern), slog.String("error", err.Error()))
	}
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, newPageData(poll, res, stale, cp, time.Now())); err != nil {
		problem.Failed(lv.log, r, "live page rendering failed", err)
		problem.Write(w, http.StatusInternalServerError, problem.Internal,
			"intake failed on this request; it has been logged: retry later, and report it if it persists", 0)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", pageCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(http.StatusOK)
	w.Write(buf.Bytes())
}

// newPageData is the page of poll p with the figures res (stale: read
// before PostgreSQL stopped answering) and the latest checkpoint's size cp
// (0: none), at now.
func newPageData(p ledger.Poll, res ledger.Results, stale bool, cp int64, now time.Time) pageData {
	d := pageData{
		PollID: p.ID, Title: p.Title, LivePath: "/v1/polls/" + p.ID + "/live",
		Total: res.Total, AsOf: peopleTime(res.AsOf), AsOfISO: res.AsOf.UTC().Format(time.RFC3339Nano),
		Stale: stale, TreeSize: res.TreeSize, Checkpoint: cp,
		CSS: template.CSS(pageCSS), JS: template.JS(pageJS),
	}
	switch {
	case now.Before(p.OpensAt):
		d.State = "Opens " + peopleTime(p.OpensAt)
	case p.OpenAt(now) && p.ClosesAt != nil:
		d.State = "Open, closes " + peopleTime(*p.ClosesAt)
		d.ClosesAt = p.ClosesAt.UTC().Format(time.RFC3339)
	case p.OpenAt(now):
		d.State = "Open"
	default:
		d.State = "Closed " + peopleTime(*p.ClosesAt)
		d.Closed = true
	}
	d.Kind, d.MaxScore, d.Ballots = string(p.BallotRules().Kind), p.BallotRules().MaxScore, res.Ballots
	if res.Kind != "" {
		d.Kind = string(res.Kind)
	}
	d.Choices = pageChoices(d.Kind, d.MaxScore, res)
	if d.Kind == string(vote.KindRanked) {
		d.Condorcet = condorcetLine(res.CondorcetWinner.ID)
	}
	return d
}

// pageChoices are the choices of res as a poll of kind shows them; the
// page's script computes the same from each frame.
func pageChoices(kind string, maxScore int, res ledger.Results) []pageChoice {
	out := make([]pageChoice, 0, len(res.Results))
	var topBorda int64
	for _, c := range res.Results {
		if c.Borda != nil {
			topBorda = max(topBorda, *c.Borda)
		}
	}
	for _, c := range res.Results {
		pc := pageChoice{ID: c.CandidateID, Votes: c.Votes}
		switch vote.Kind(kind) {
		case vote.KindMultiple:
			pc.Share = share(c.Votes, res.Ballots)
			pc.Width = pc.Share
		case vote.KindApprove:
			pc.Yes, pc.No, pc.Abstain = deref(c.Yes), deref(c.No), deref(c.Abstain)
			marks := pc.Yes + pc.No + pc.Abstain
			pc.YesWidth, pc.NoWidth, pc.AbstainWidth = share(pc.Yes, marks), share(pc.No, marks), share(pc.Abstain, marks)
			pc.Share = pc.YesWidth
		case vote.KindScore:
			sum := deref(c.Score)
			pc.Mean = mean(sum, c.Votes)
			pc.Width = share(sum, c.Votes*int64(max(maxScore, 1)))
		case vote.KindRanked:
			pc.Borda = deref(c.Borda)
			pc.Width = share(pc.Borda, topBorda)
		default:
			pc.Share = share(c.Votes, res.Total)
			pc.Width = pc.Share
		}
		out = append(out, pc)
	}
	if vote.Kind(kind) == vote.KindRanked {
		// Highest Borda count first; a tie keeps the poll's order.
		slices.SortStableFunc(out, func(a, b pageChoice) int { return cmp.Compare(b.Borda, a.Borda) })
	}
	return out
}

func deref(n *int64) int64 {
	if n == nil {
		return 0
	}
	return *n
}

// mean is sum/n with two decimals, rounded half up; "–" with no votes.
func mean(sum, n int64) string {
	if n == 0 {
		return "–"
	}
	hundredths := (sum*200 + n) / (2 * n)
	return fmt.Sprintf("%d.%02d", hundredths/100, hundredths%100)
}

// condorcetLine names a ranked poll's Condorcet winner, or says there is
// none ("" is none), as the page's script does.
func condorcetLine(winner string) string {
	if winner == "" {
		return "No Condorcet winner: no choice beats every other one head to head."
	}
	return "Condorcet winner: " + winner + " (beats every other choice head to head)."
}

// share is votes/total as a percentage with one decimal, rounded half up
// in whole tenths, as the page's script computes it.
func share(votes, total int64) string {
	var tenths int64
	if total > 0 {
		tenths = (votes*2000 + total) / (2 * total)
	}
	return strconv.FormatInt(tenths/10, 10) + "." + strconv.FormatInt(tenths%10, 10) + "%"
}

// peopleTime is t for people: UTC to the second.
func peopleTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05") + " UTC" }

// viewablePoll reports whether the request may see poll id's results live:
// anyone may when the poll's results are public; otherwise only a request
// with the bearer token of a principal that may see them (as for GET
// /v1/polls/{poll_id}/results: one that may vote on it). A request without
// a token gets, for a poll that is not public, the very 404 of an unknown
// poll, and so learns nothing of it; one with a token is authenticated
// first (401, 429 past its reads, 503), whatever the poll. It returns the
// poll and the request's principal ("" without a token); otherwise it
// answers and returns false.
func (lv *Live) viewablePoll(w http.ResponseWriter, r *http.Request, id string) (ledger.Poll, string, bool) {
	var principal string
	if len(r.Header["Authorization"]) > 0 {
		var ok bool
		if principal, ok = lv.auth.Principal(w, r); !ok {
			return ledger.Poll{}, "", false
		}
	}
	p, mayVote, err := lv.catalog.Poll(id, principal)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		problem.WriteUnknownPoll(w, id)
	case err != nil:
		lv.reads.LedgerFailed(w, r, "poll lookup failed", err)
	case p.PublicResults || principal != "" && mayVote:
		return p, principal, true
	default:
		problem.WriteUnknownPoll(w, id) // not to be told apart from an unknown poll
	}
	return ledger.Poll{}, "", false
}

// checkpointCache holds the size of each poll's latest signed checkpoint,
// read at most once per Config.ReadCacheTTL per poll (concurrent reads
// sharing one query), so that page loads, which need no token, cost
// PostgreSQL no more than the results do. It holds no more polls than the
// catalog: it is only read for a poll the catalog holds.
type checkpointCache struct {
	lv    *Live
	group singleflight.Group

	mu   sync.Mutex
	last map[string]checkpointRead
}

// checkpointRead is the size read of a poll's latest checkpoint (0: none)
// and when.
type checkpointRead struct {
	size int64
	read time.Time
}

func newCheckpointCache(lv *Live) *checkpointCache {
	return &checkpointCache{lv: lv, last: map[string]checkpointRead{}}
}

// size is the size of poll id's latest signed checkpoint, 0 when it has
// none; read within Config.ReadCacheTTL, else now.
func (c *checkpointCache) size(ctx context.Context, id string) (int64, error) {
	c.mu.Lock()
	last, held := c.last[id]
	c.mu.Unlock()
	if held && time.Since(last.read) < c.lv.cfg.ReadCacheTTL {
		return last.size, nil
	}
	v, err, _ := c.group.Do(id, func() (any, error) {
		// Shared by every read waiting: no one reader's cancellation may
		// end it.
		return c.read(context.WithoutCancel(ctx), id)
	})
	if err != nil {
		return last.size, err
	}
	return v.(int64), nil
}

// read reads the size of poll id's latest signed checkpoint now, and keeps
// it.
func (c *checkpointCache) read(ctx context.Context, id string) (int64, error) {
	var size int64
	err := c.lv.reads.ReadLedger(ctx, func(ctx context.Context) error {
		cp, err := c.lv.store.LatestCheckpoint(ctx, id)
		if errors.Is(err, ledger.ErrNotFound) {
			return nil
		}
		size = cp.Size
		return err
	})
	if err != nil {
		return 0, err
	}
	c.put(id, size)
	return size, nil
}

func (c *checkpointCache) put(id string, size int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last[id] = checkpointRead{size: size, read: time.Now()}
}
