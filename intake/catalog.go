package intake

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"tally/vote"

	"tally/ledger"
)

// pollInfo is one poll as intake checks votes against it, with the enqueue
// script's arguments that depend on the poll and choice only, made once.
type pollInfo struct {
	poll     ledger.Poll
	idArg    any // the poll id
	choices  map[string]*choice
	eligible map[string]struct{} // nil for ledger.EligibleAny
}

// choice is one choice of a poll.
type choice struct {
	idArg          any // the candidate id
	fingerprintArg any // vote.FingerprintHex of the poll and candidate
}

func newPollInfo(p ledger.Poll) *pollInfo {
	pi := &pollInfo{poll: p, idArg: p.ID, choices: make(map[string]*choice, len(p.Choices))}
	for _, c := range p.Choices {
		pi.choices[c] = &choice{idArg: c, fingerprintArg: vote.FingerprintHex(p.ID, c)}
	}
	if p.Eligibility == ledger.EligibleList {
		pi.eligible = make(map[string]struct{}, len(p.Eligible))
		for _, e := range p.Eligible {
			pi.eligible[e] = struct{}{}
		}
	}
	return pi
}

// choice returns the poll's choice c, or nil.
func (pi *pollInfo) choice(c []byte) *choice { return pi.choices[string(c)] }

func (pi *pollInfo) mayVote(principalID string) bool {
	if pi.eligible == nil {
		return true
	}
	_, ok := pi.eligible[principalID]
	return ok
}

// catalog is the in-process copy of polls, choices and eligibility. It is
// reloaded whole on every change the store's WatchCatalog reports and every
// refreshEvery; a poll it does not hold is looked up once (maxMissLookups at
// a time) and remembered, and an unknown id is remembered as unknown for
// unknownTTL. While PostgreSQL does not answer, it serves what it holds as
// it is: a poll's opening and closing times are in it, so a poll that
// closes meanwhile still closes on time; a poll it does not hold cannot be
// looked up, and its votes get 503.
type catalog struct {
	store        *ledger.Store
	pg           *pgState
	log          *slog.Logger
	refreshEvery time.Duration
	unknownTTL   time.Duration
	timeout      time.Duration
	// onPrincipals runs when the principals table changed.
	onPrincipals func()
	// onRefresh, when set, runs after each successful reload (tests).
	onRefresh func()

	mu      sync.RWMutex
	polls   map[string]*pollInfo
	unknown map[string]time.Time // poll id -> forget after

	kick chan struct{} // a reload is wanted
	// misses bounds the lookups of polls the catalog does not hold that
	// run at once, so ids that do not exist cannot flood PostgreSQL.
	misses chan struct{}
}

// maxMissLookups bounds the concurrent lookups of polls the catalog does not
// hold.
const maxMissLookups = 4

// maxUnknownPolls bounds the ids remembered as unknown.
const maxUnknownPolls = 4096

func newCatalog(store *ledger.Store, log *slog.Logger, cfg Config, pg *pgState, onPrincipals func()) *catalog {
	return &catalog{
		store: store, pg: pg, log: log, refreshEvery: cfg.CatalogRefresh, unknownTTL: cfg.UnknownPollTTL,
		timeout: cfg.PostgresTimeout, onPrincipals: onPrincipals,
		polls: map[string]*pollInfo{}, unknown: map[string]time.Time{},
		kick: make(chan struct{}, 1), misses: make(chan struct{}, maxMissLookups),
	}
}

// lookup returns the poll of id, or an error wrapping ledger.ErrNotFound, or
// another error when PostgreSQL could not tell. A lookup in PostgreSQL ends
// by deadline too, unless it is zero.
func (c *catalog) lookup(ctx context.Context, idBytes []byte, deadline time.Time) (*pollInfo, error) {
	c.mu.RLock()
	pi, ok := c.polls[string(idBytes)] // no string is made for an index
	c.mu.RUnlock()
	if ok {
		return pi, nil
	}
	id := string(idBytes)
	c.mu.RLock()
	forget, isUnknown := c.unknown[id]
	c.mu.RUnlock()
	now := time.Now()
	if isUnknown && now.Before(forget) {
		return nil, ledger.ErrNotFound
	}
	if c.pg.skip(now) {
		return nil, errPostgresDown
	}
	lctx, cancel := boundedContext(ctx, c.timeout, deadline)
	defer cancel()
	select {
	case c.misses <- struct{}{}:
		defer func() { <-c.misses }()
	case <-lctx.Done():
		return nil, lctx.Err()
	}
	p, err := c.store.Poll(lctx, id)
	c.pg.observe(ctx, err)
	if errors.Is(err, ledger.ErrNotFound) {
		c.mu.Lock()
		if len(c.unknown) >= maxUnknownPolls {
			clear(c.unknown)
		}
		c.unknown[id] = time.Now().Add(c.unknownTTL)
		c.mu.Unlock()
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	pi = newPollInfo(p)
	c.mu.Lock()
	c.polls[id] = pi
	delete(c.unknown, id)
	c.mu.Unlock()
	return pi, nil
}

// reload replaces the whole catalog with what PostgreSQL holds now.
func (c *catalog) reload(ctx context.Context) error {
	lctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	ps, err := c.store.Polls(lctx)
	c.pg.observe(ctx, err)
	if err != nil {
		return err
	}
	polls := make(map[string]*pollInfo, len(ps))
	for _, p := range ps {
		polls[p.ID] = newPollInfo(p)
	}
	c.mu.Lock()
	c.polls = polls
	clear(c.unknown)
	c.mu.Unlock()
	if c.onRefresh != nil {
		c.onRefresh()
	}
	return nil
}

// requestReload asks the refresher for a reload without waiting for it.
func (c *catalog) requestReload() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// run keeps the catalog fresh until ctx is done: one goroutine listens for
// catalog changes, another reloads when asked and every refreshEvery.
func (c *catalog) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { c.listen(ctx) })
	wg.Go(func() { c.refresh(ctx) })
	wg.Wait()
}

func (c *catalog) refresh(ctx context.Context) {
	t := time.NewTicker(c.refreshEvery)
	defer t.Stop()
	for {
		if err := c.reload(ctx); err != nil && ctx.Err() == nil {
			c.log.LogAttrs(ctx, slog.LevelWarn, "catalog reload failed; serving the cached catalog",
				slog.String("error", err.Error()))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.kick:
		}
	}
}

// listen asks for a reload whenever polls, choices or eligibility changed,
// and tells the authenticator when principals did, until ctx is done. The
// store's watcher reports both on every (re)connection, since
// notifications may have been missed meanwhile.
func (c *catalog) listen(ctx context.Context) {
	c.store.WatchCatalog(ctx, func(ch ledger.CatalogChange) {
		if ch.Polls {
			c.requestReload()
		}
		if ch.Principals && c.onPrincipals != nil {
			c.onPrincipals()
		}
	})
}
