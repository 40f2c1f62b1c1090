package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/sethvargo/go-retry"

	"tally/audit"
	"tally/ledger"
	"tally/vote"
)

// importEvents reads JSON lines from in and appends them in batches of
// size, with up to workers batches in flight at once. On a bad line it
// applies everything before it, then stops with an error that names the
// line; what was imported stays imported.
//
// Each worker owns the polls vote.Lanes gives it, so the events of one
// poll reach the ledger in file order, one batch after another: its rows
// get their leaf indexes in file order, and an export imported into an
// empty database has the same Merkle roots, so checkpoints signed by one
// deployment verify against the other. The outcomes are those of
// importing the file with one worker, except where one principal used one
// event id in two polls: which of the two is recorded (and which rejected
// as key_reused) then depends on the workers' timing. An export never
// holds such a pair.
//
// A definition line goes to its poll's worker too, in file order, after
// the votes before it (define): the first of a poll creates the poll when
// the database has none of that id, so its log starts as the export's
// did; a later one closes the poll as it was closed. The counts of
// outcomes hold definitions under "definition: " and what each did.
// errImportFailed stops the reading of the file once a worker failed;
// importer.close says why.
var errImportFailed = errors.New("import failed")

func importEvents(ctx context.Context, store *ledger.Store, in io.Reader, size, workers int) (map[string]int, int, error) {
	imp := newImporter(ctx, store, size, workers)
	line := 0
	now := time.Now()
	err := audit.EachLine(in, "import", func(b []byte, n int) error {
		line = n
		if imp.failed() {
			return errImportFailed
		}
		e, def, err := parseImportLine(b, now)
		if err != nil {
			return fmt.Errorf("line %d: %v; the events before it were imported (counts above); fix the line and import the file again: what is already in the ledger answers duplicate", n, err)
		}
		if def != nil {
			imp.define(def)
		} else {
			imp.add(e)
		}
		return nil
	})
	if err != nil && !errors.Is(err, errImportFailed) {
		if ferr := imp.close(); ferr != nil {
			return imp.counts, line, ferr
		}
		return imp.counts, line, err
	}
	return imp.counts, line, imp.close()
}

// importer spreads events over its workers by poll and appends each
// worker's batches in order. At most two batches per worker are held: one
// being filled, one being applied.
type importer struct {
	ctx     context.Context
	store   *ledger.Store
	size    int
	lanes   vote.Lanes
	filling [][]ledger.Event
	queues  []chan importItem
	wg      sync.WaitGroup

	mu     sync.Mutex
	counts map[string]int // outcome -> events
	err    error          // the first append that failed
}

func newImporter(ctx context.Context, store *ledger.Store, size, workers int) *importer {
	imp := &importer{ctx: ctx, store: store, size: size, lanes: vote.NewLanes(workers),
		filling: make([][]ledger.Event, workers), queues: make([]chan importItem, workers),
		counts: map[string]int{}}
	for w := range imp.queues {
		imp.queues[w] = make(chan importItem)
		imp.wg.Add(1)
		go imp.work(imp.queues[w])
	}
	return imp
}

func (imp *importer) add(e ledger.Event) {
	w := imp.lanes.Of(e.PollID)
	imp.filling[w] = append(imp.filling[w], e)
	if len(imp.filling[w]) == imp.size {
		imp.send(w)
	}
}

// importItem is what a worker applies next: a batch of events, or a
// definition.
type importItem struct {
	batch []ledger.Event
	def   *audit.Definition
}

// send hands worker w the batch it is filling.
func (imp *importer) send(w int) {
	imp.queues[w] <- importItem{batch: imp.filling[w]}
	imp.filling[w] = make([]ledger.Event, 0, imp.size)
}

// define hands a definition to its poll's worker, after the events of the
// poll before it.
func (imp *importer) define(d *audit.Definition) {
	w := imp.lanes.Of(d.PollID)
	if len(imp.filling[w]) > 0 {
		imp.send(w)
	}
	imp.queues[w] <- importItem{def: d}
}

// close sends what is being filled, waits for every worker, and returns
// the first error.
func (imp *importer) close() error {
	for w, q := range imp.queues {
		if len(imp.filling[w]) > 0 {
			imp.send(w)
		}
		close(q)
	}
	imp.wg.Wait()
	return imp.err
}

func (imp *importer) failed() bool {
	imp.mu.Lock()
	defer imp.mu.Unlock()
	return imp.err != nil
}

// work applies the items of one worker; after the first error anywhere
// it only drains its queue.
func (imp *importer) work(q <-chan importItem) {
	defer imp.wg.Done()
	defined := map[string]bool{} // the polls this worker saw a definition of
	for item := range q {
		if imp.failed() {
			continue
		}
		var outs []ledger.Outcome
		var did string
		var err error
		if item.def != nil {
			did, err = imp.apply(item.def, defined[item.def.PollID])
			defined[item.def.PollID] = true
		} else {
			outs, err = imp.append(item.batch)
		}
		imp.mu.Lock()
		if err != nil && imp.err == nil {
			imp.err = err
		}
		for _, o := range outs {
			imp.counts[o.String()]++
		}
		if did != "" {
			imp.counts["definition: "+did]++
		}
		imp.mu.Unlock()
	}
}

// apply applies a poll's definition: the first of the file (later false)
// creates the poll when there is none of its id (an eligible list, which
// the export holds only by hash, must be created first, with tally poll
// create), or leaves the poll as it is, saying which field differs from
// the export's, if one does (its log then starts with another leaf, and
// no root will be the export's); a later one closes the poll at its
// closing time. It says which it did.
func (imp *importer) apply(d *audit.Definition, later bool) (string, error) {
	if later {
		if d.ClosesAt == nil {
			return "unchanged", nil
		}
		return "poll closed", imp.store.ClosePoll(imp.ctx, d.PollID, *d.ClosesAt)
	}
	p, err := imp.store.Poll(imp.ctx, d.PollID)
	switch {
	case err == nil && differs(p, d) != "":
		return "poll kept, differs in its " + differs(p, d), nil
	case err == nil:
		return "poll kept", nil
	case !errors.Is(err, ledger.ErrNotFound):
		return "", err
	case d.EligibleHash != nil:
		return "", fmt.Errorf("poll %s takes votes from a list of principals, which the export holds only by its hash: "+
			"create the poll with tally poll create and its --eligible list, then import again", d.PollID)
	}
	err = imp.store.CreatePoll(imp.ctx, ledger.Poll{ID: d.PollID, Title: d.Title, OpensAt: d.OpensAt, ClosesAt: d.ClosesAt, Choices: d.Choices,
		Rules: rulesOf(d)})
	return "poll created", err
}

// append applies one batch, trying again up to four times, after 200ms,
// 400ms, 600ms and 800ms, when the ledger says the failure is transient.
// A cancelled context ends the wait at once.
func (imp *importer) append(batch []ledger.Event) ([]ledger.Outcome, error) {
	var waits time.Duration
	backoff := retry.WithMaxRetries(4, retry.BackoffFunc(func() (time.Duration, bool) {
		waits += 200 * time.Millisecond
		return waits, false
	}))
	var outs []ledger.Outcome
	err := retry.Do(imp.ctx, backoff, func(ctx context.Context) error {
		var err error
		outs, err = imp.store.Append(ctx, batch)
		if ledger.IsRetryable(err) {
			return retry.RetryableError(err)
		}
		return err
	})
	return outs, err
}

// differs names the first field of the question (title, opens_at,
// choices, eligible_hash) in which the poll p differs from the
// definition d, or "". The closing time is left out: the export's later
// definitions close the poll as it was closed.
func differs(p ledger.Poll, d *audit.Definition) string {
	var hash *[32]byte
	if p.Eligibility == ledger.EligibleList {
		h := audit.EligibleListHash(p.Eligible)
		hash = &h
	}
	here := audit.Definition{PollID: p.ID, Title: p.Title, OpensAt: p.OpensAt, ClosesAt: d.ClosesAt, EligibleHash: hash, Choices: p.Choices,
		Rules: p.BallotRules()}
	there := *d
	there.Rules = rulesOf(d)
	if field, _ := there.Follows(here); field != "definition" { // "definition": the same, closing time and all
		return field
	}
	return ""
}

// rulesOf is d's ballot rules, vote.Single for a definition that gives
// none (a version 2 leaf).
func rulesOf(d *audit.Definition) vote.Rules {
	if d.Rules == (vote.Rules{}) {
		return vote.Single
	}
	return d.Rules
}
