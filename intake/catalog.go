package intake

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"tally/vote"

	"tally/ledger"
)

// pollInfo is one poll as intake checks votes against it, with the enqueue
// script's arguments that depend on the poll and choice only, made once.
// A ballot of another kind than single is one of too many to make
// beforehand: its arguments are made per vote (answer).
type pollInfo struct {
	poll     ledger.Poll
	rules    vote.Rules // poll.BallotRules()
	idArg    any        // the poll id
	choices  map[string]*choice
	eligible map[string]struct{} // nil for ledger.EligibleAny
}

// choice is the enqueue script's arguments of one answer to a poll: a
// choice of a single-choice poll, or a ballot in canonical form.
type choice struct {
	idArg          any // the candidate id, or the canonical ballot
	fingerprintArg any // vote.FingerprintHex of the poll and idArg
}

// answer is the enqueue arguments of a ballot of the poll in canonical
// form, made for this vote.
func (pi *pollInfo) answer(canonical string) *choice {
	return &choice{idArg: canonical, fingerprintArg: vote.FingerprintHex(pi.poll.ID, canonical)}
}

func newPollInfo(p ledger.Poll) *pollInfo {
	pi := &pollInfo{poll: p, rules: p.BallotRules(), idArg: p.ID, choices: make(map[string]*choice, len(p.Choices))}
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

// catalog is the in-process copy of polls, choices and eligibility: all
// of them, loaded whole at start and again on every change the store's
// WatchCatalog reports and every refreshEvery. A poll id it does not hold
// is unknown: lookup answers from memory alone, with no query, so an
// absent poll and a hidden one answer in the same time and a request for
// any id costs PostgreSQL nothing. A poll created is known once intake
// heard the NOTIFY of its creation and reloaded (milliseconds; within
// refreshEvery if the notification was lost). While PostgreSQL does not
// answer, it serves what it holds as it is: a poll's opening and closing
// times are in it, so a poll that closes meanwhile still closes on time.
// Until its first load every lookup answers errPostgresDown.
type catalog struct {
	store        *ledger.Store
	pg           *pgState
	log          *slog.Logger
	refreshEvery time.Duration
	timeout      time.Duration
	// onPrincipals runs when the principals or retired keys changed.
	onPrincipals func()
	// onRefresh, when set, runs after each successful reload (tests).
	onRefresh func()

	polls atomic.Pointer[map[string]*pollInfo] // nil until the first load
	// reloading orders the reloads: one that began reading earlier never
	// stores after one that began later (an admin route's own reload after
	// its commit, beside the background's).
	reloading sync.Mutex

	kick chan struct{} // a reload is wanted
}

func newCatalog(store *ledger.Store, log *slog.Logger, cfg Config, pg *pgState, onPrincipals func()) *catalog {
	return &catalog{
		store: store, pg: pg, log: log, refreshEvery: cfg.CatalogRefresh,
		timeout: cfg.PostgresTimeout, onPrincipals: onPrincipals,
		kick: make(chan struct{}, 1),
	}
}

// lookup returns the poll of id from memory, or ledger.ErrNotFound, or
// errPostgresDown before the catalog was ever loaded.
func (c *catalog) lookup(idBytes []byte) (*pollInfo, error) {
	polls := c.polls.Load()
	if polls == nil {
		return nil, errPostgresDown
	}
	if pi, ok := (*polls)[string(idBytes)]; ok { // no string is made for an index
		return pi, nil
	}
	return nil, ledger.ErrNotFound
}

// loaded reports whether the catalog was loaded once.
func (c *catalog) loaded() bool { return c.polls.Load() != nil }

// reload replaces the whole catalog with what PostgreSQL holds now.
func (c *catalog) reload(ctx context.Context) error {
	c.reloading.Lock()
	defer c.reloading.Unlock()
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
	c.polls.Store(&polls)
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
