package intake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tally/ledger"
)

// This file owns how the catalog and the revocations intake holds stay
// current: the follower of the catalog's change log (ledger.CatalogChange).
// It loads both whole once, at start, in pages, and from then on applies
// only the changes after the last one it applied, reading again only the
// polls, principals and keys they name (the polls in the statement that
// reads the changes): so a change costs intake what changed, not the size
// of the catalog. It catches up when a NOTIFY
// names a change it has not applied, when its listener (re)connects,
// every Config.CatalogRefresh (one indexed query when nothing changed),
// and when an admin route of this intake wrote (before its answer). It
// loads the catalog whole again only when it fell behind a trimmed log,
// or the log went back (a database restored or failed over).
//
// No read of the follower tells pgState that PostgreSQL does not answer: a
// slow page is not an outage, and the admin routes' writes are judged by
// their own statements. A read that fails is logged and tried again, and
// a full load goes on from the page it reached.

// catalogPage is how many polls one query of a full load reads at first:
// each page is a statement of its own under Config.PostgresTimeout, so a
// catalog of any size loads, one bounded read after another. A page that
// does not end within it (long eligibility lists) is read again in halves,
// down to one poll a page, for the rest of the load.
const catalogPage = 1000

// changesPage is how many changes one read of the log takes.
const changesPage = 1000

// followRetryEvery is how soon a catch-up that failed is tried again.
const followRetryEvery = time.Second

// follower applies the catalog's change log to the catalog and the
// revocations.
type follower struct {
	store        *ledger.Store
	log          *slog.Logger
	pg           *pgState
	cat          *catalog
	rev          *revocations
	every        time.Duration // Config.CatalogRefresh
	timeout      time.Duration // of one query: Config.PostgresTimeout
	startTimeout time.Duration // Config.CatalogLoadTimeout
	// onPrincipals runs when principals or keys changed, or were loaded
	// whole; nil for nothing.
	onPrincipals func()
	loads        prometheus.Counter // whole loads ended
	applies      prometheus.Counter // changes applied

	// turn is held by the one catching up (a channel, so that waiting for
	// it ends with its context).
	turn chan struct{}
	// applied is the seq of the last change applied; -1 until the first
	// full load ends. Written with turn held.
	applied atomic.Int64
	// load is the full load under way, resumed where it stopped; nil
	// when none is. Guarded by turn.
	load *fullLoad
	kick chan struct{}
}

// fullLoad is a load of the whole catalog: the polls read so far, page
// after page in id order, to be brought up to date from horizon on.
type fullLoad struct {
	horizon int64  // the last change committed before the first page
	after   string // the last poll id read
	page    int    // polls a page
	polls   map[string]*pollInfo
	started time.Time
}

func newFollower(store *ledger.Store, log *slog.Logger, cfg Config, m *metrics, pg *pgState, cat *catalog, rev *revocations, onPrincipals func()) *follower {
	f := &follower{
		store: store, log: log, pg: pg, cat: cat, rev: rev, every: cfg.CatalogRefresh, timeout: cfg.PostgresTimeout,
		startTimeout: cfg.CatalogLoadTimeout, onPrincipals: onPrincipals, loads: m.catalogLoads, applies: m.catalogChanges,
		turn: make(chan struct{}, 1), kick: make(chan struct{}, 1),
	}
	f.applied.Store(-1)
	return f
}

// loadAtStart brings the catalog up to date within Config.CatalogLoadTimeout,
// and else says how far its load got: intake serves all the same (not
// ready until the load ends), and run goes on with it.
func (f *follower) loadAtStart(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, f.startTimeout)
	defer cancel()
	err := f.catchUp(sctx)
	switch {
	case err == nil || ctx.Err() != nil:
	case f.cat.loaded():
		f.log.LogAttrs(ctx, slog.LevelWarn, "the catalog is loaded but its latest changes are not applied yet; intake goes on applying them",
			slog.Int("polls", f.cat.size()), slog.String("error", err.Error()))
	default:
		f.log.LogAttrs(ctx, slog.LevelWarn, "the catalog is not loaded yet; intake is not ready until it is, and goes on loading",
			slog.Int("polls_read", f.pollsRead()), slog.Duration("within", f.startTimeout), slog.String("error", err.Error()))
	}
}

// pollsRead is how many polls the full load under way read so far, or
// the catalog holds once loaded.
func (f *follower) pollsRead() int {
	select {
	case f.turn <- struct{}{}:
		defer func() { <-f.turn }()
	default:
		return -1 // someone is catching up: unknown
	}
	if f.load != nil {
		return len(f.load.polls)
	}
	return f.cat.size()
}

// run keeps the catalog current until ctx is done: one goroutine listens
// for notifications, another catches up when asked, every
// Config.CatalogRefresh, and a second after a failure.
func (f *follower) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() {
		f.store.WatchCatalog(ctx, func(seq int64) {
			if seq == 0 || seq > f.applied.Load() {
				f.requestCatchUp()
			}
		})
	})
	wg.Go(func() { f.keepUp(ctx) })
	wg.Wait()
}

func (f *follower) keepUp(ctx context.Context) {
	t := time.NewTicker(f.every)
	defer t.Stop()
	for {
		var retry <-chan time.Time
		if err := f.catchUp(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			f.log.LogAttrs(ctx, slog.LevelWarn, "catalog not brought up to date; serving what it holds, and trying again",
				slog.String("error", err.Error()), slog.Duration("retry_in", followRetryEvery))
			retry = time.After(followRetryEvery)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-f.kick:
		case <-retry:
		}
	}
}

// requestCatchUp asks run to catch up without waiting for it.
func (f *follower) requestCatchUp() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// catchUp applies every change committed before it was called: after a
// full load when none ended yet, when the log was trimmed past the last
// change applied, or when it ends before it (a database restored or
// failed over).
func (f *follower) catchUp(ctx context.Context) error {
	select {
	case f.turn <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("wait for the catalog's follower: %w", ctx.Err())
	}
	defer func() { <-f.turn }()
	for {
		if f.applied.Load() < 0 {
			if err := f.loadWhole(ctx); err != nil {
				return err
			}
		}
		err := f.applyChanges(ctx)
		if !errors.Is(err, ledger.ErrChangesTrimmed) && !errors.Is(err, ledger.ErrChangesRewound) {
			return err
		}
		f.log.LogAttrs(ctx, slog.LevelWarn, "the catalog's change log no longer holds the changes after the last one applied; loading the catalog whole",
			slog.Int64("applied", f.applied.Load()), slog.String("error", err.Error()))
		f.applied.Store(-1)
	}
}

// loadWhole reads the catalog and the revocations whole, going on from
// the page a load that failed reached, and replaces what intake holds.
func (f *follower) loadWhole(ctx context.Context) error {
	if f.load == nil {
		var horizon int64
		err := f.query(ctx, func(ctx context.Context) (err error) {
			horizon, err = f.store.CatalogHorizon(ctx)
			return err
		})
		if err != nil {
			return fmt.Errorf("load the catalog: %w", err)
		}
		f.load = &fullLoad{horizon: horizon, page: catalogPage, polls: map[string]*pollInfo{}, started: time.Now()}
	}
	l := f.load
	if err := f.readPages(ctx, l); err != nil {
		return err
	}
	var rev ledger.Revocations
	err := f.query(ctx, func(ctx context.Context) (err error) {
		rev, err = f.store.Revocations(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("load the revocations (the %d polls are read): %w", len(l.polls), err)
	}
	f.cat.replace(l.polls)
	f.rev.replace(rev)
	f.applied.Store(l.horizon)
	f.load = nil
	f.loads.Inc()
	if f.onPrincipals != nil {
		f.onPrincipals()
	}
	// The pages read (every id of every list, decoded once) are garbage
	// now, as large as the catalog; under the daemons' GOGC of 400 they
	// would stay resident until the heap grew to five times it.
	debug.FreeOSMemory()
	f.log.LogAttrs(ctx, slog.LevelInfo, "catalog loaded", slog.Int("polls", len(l.polls)),
		slog.Int("revoked_principals", len(rev.Principals)), slog.Int("retired_keys", len(rev.Keys)),
		slog.Int64("seq", l.horizon), slog.Duration("took", time.Since(l.started)))
	return nil
}

// readPages reads the polls of load l, page after page, from where it
// stopped to the last.
func (f *follower) readPages(ctx context.Context, l *fullLoad) error {
	for {
		var page []ledger.Poll
		err := f.query(ctx, func(ctx context.Context) (err error) {
			page, err = f.store.PollsAfter(ctx, l.after, l.page)
			return err
		})
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil && l.page > 1 {
			l.page /= 2
			f.log.LogAttrs(ctx, slog.LevelInfo, "a page of the catalog took longer than the PostgreSQL timeout; reading smaller pages",
				slog.Int("polls_a_page", l.page), slog.Int("polls_read", len(l.polls)))
			continue
		}
		if err != nil {
			return fmt.Errorf("load the catalog (%d polls read so far, going on from there): %w", len(l.polls), err)
		}
		now := time.Now()
		for _, p := range page {
			l.polls[p.ID] = newPollInfo(p, now)
		}
		if len(page) < l.page {
			return nil
		}
		l.after = page[len(page)-1].ID
	}
}

// applyChanges applies the changes after the last one applied, a page at
// a time, until none is left.
func (f *follower) applyChanges(ctx context.Context) error {
	for {
		var u ledger.CatalogUpdate
		err := f.query(ctx, func(ctx context.Context) (err error) {
			u, err = f.store.CatalogChangesAfter(ctx, f.applied.Load(), changesPage)
			return err
		})
		if err != nil || len(u.Changes) == 0 {
			return err
		}
		if err := f.apply(ctx, u); err != nil {
			return err
		}
		if len(u.Changes) < changesPage {
			return nil
		}
	}
}

// apply puts the polls of u in the catalog, and reads again the principals
// and keys its changes name for the revocations.
func (f *follower) apply(ctx context.Context, u ledger.CatalogUpdate) error {
	var polls, principals, keys []string
	for _, c := range u.Changes {
		switch c.Kind {
		case ledger.ChangePoll:
			polls = append(polls, c.Target)
		case ledger.ChangePrincipal:
			principals = append(principals, c.Target)
		case ledger.ChangeKey:
			keys = append(keys, c.Target)
		}
	}
	if len(polls) > 0 {
		f.cat.apply(unique(polls), u.Polls)
	}
	if len(principals)+len(keys) > 0 {
		principals, keys = unique(principals), unique(keys)
		var fresh ledger.Revocations
		err := f.query(ctx, func(ctx context.Context) (err error) {
			fresh, err = f.store.RevocationsOf(ctx, principals, keys)
			return err
		})
		if err != nil {
			return fmt.Errorf("apply catalog changes: %w", err)
		}
		f.rev.apply(principals, keys, fresh)
		if f.onPrincipals != nil {
			f.onPrincipals()
		}
	}
	f.applied.Store(u.Changes[len(u.Changes)-1].Seq)
	f.applies.Add(float64(len(u.Changes)))
	return nil
}

// query runs one read under Config.PostgresTimeout. An answer tells
// pgState that PostgreSQL answers; a failure tells it nothing (see the
// file's comment).
func (f *follower) query(ctx context.Context, read func(context.Context) error) error {
	qctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	err := read(qctx)
	if err == nil {
		f.pg.observe(ctx, nil)
	}
	return err
}

func unique(ids []string) []string {
	slices.Sort(ids)
	return slices.Compact(ids)
}
