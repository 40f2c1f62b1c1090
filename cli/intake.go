package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	ucli "github.com/urfave/cli/v2"

	"tally/credential"
	"tally/intake"
	"tally/ledger"
)

func intakeCommand() *ucli.Command {
	def := intake.DefaultConfig()
	flags := append([]ucli.Flag{startupWaitFlag(), allowSuperuserFlag()}, intakeEnqueueFlags(def)...)
	flags = append(flags, intakeLookupFlags(def)...)
	flags = append(flags, intakeLimitFlags(def)...)
	flags = append(flags, intakeHTTPFlags(def)...)
	flags = append(flags, intakeLiveFlags(def)...)
	return &ucli.Command{
		Name:  "intake",
		Usage: "run the HTTP intake daemon: authenticate, validate, rate-limit and enqueue votes",
		Description: "intake serves POST /v1/votes, GET /v1/votes/{event_id}, GET /v1/polls/{poll_id}/results, " +
			"the live results page GET /polls/{poll_id} and its stream GET /v1/polls/{poll_id}/live, " +
			"/healthz, /readyz and /metrics. It answers 202 only after Redis acknowledged the vote. " +
			"SIGTERM or SIGINT stops it: it stops accepting, drains the requests in flight within " +
			"--shutdown-timeout and exits 0.",
		Flags:  redisFlags(flags...),
		Action: runIntake,
	}
}

// intakeDuration is a duration flag of tally intake.
func intakeDuration(name, env string, value time.Duration, usage string) *ucli.DurationFlag {
	return &ucli.DurationFlag{Name: name, EnvVars: []string{env}, Value: value, Usage: usage}
}

// intakeEnqueueFlags are the flags of the vote path: where intake listens,
// the rate limit, the backlog bound, idempotency and the Redis pipelines.
func intakeEnqueueFlags(def intake.Config) []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "listen", EnvVars: []string{"TALLY_INTAKE_LISTEN"}, Value: def.Listen,
			Usage: "TCP `ADDR`ess to serve HTTP on"},
		&ucli.StringFlag{Name: "admin-listen", EnvVars: []string{"TALLY_INTAKE_ADMIN_LISTEN"},
			Usage: "also serve GET /healthz, /readyz and /metrics on `ADDR` (plain HTTP, keep it private), apart from --listen's bounds, " +
				"so probes and scrapes are answered while the data routes are saturated; --listen then serves no /metrics"},
		&ucli.StringFlag{Name: "tls-cert", EnvVars: []string{"TALLY_INTAKE_TLS_CERT"},
			Usage: "serve HTTPS (TLS 1.2+, HTTP/2) with the PEM certificate chain in `FILE`, reloaded when it changes; needs --tls-key"},
		&ucli.StringFlag{Name: "tls-key", EnvVars: []string{"TALLY_INTAKE_TLS_KEY"},
			Usage: "PEM private key of --tls-cert in `FILE`, reloaded when it changes"},
		&ucli.Float64Flag{Name: "rate", EnvVars: []string{"TALLY_INTAKE_RATE"}, Value: def.Rate,
			Usage: "votes per second one principal may enqueue, sustained"},
		&ucli.IntFlag{Name: "burst", EnvVars: []string{"TALLY_INTAKE_BURST"}, Value: def.Burst,
			Usage: "votes one principal may enqueue at once before --rate applies"},
		&ucli.Int64Flag{Name: "max-backlog", EnvVars: []string{"TALLY_INTAKE_MAX_BACKLOG"}, Value: def.MaxBacklog,
			Usage: "entries one stream shard may hold; beyond it votes get 503 + Retry-After"},
		intakeDuration("backlog-retry-after", "TALLY_INTAKE_BACKLOG_RETRY_AFTER", def.BacklogRetryAfter,
			"Retry-After of a refusal for a full backlog"),
		intakeDuration("idempotency-window", "TALLY_INTAKE_IDEMPOTENCY_WINDOW", def.IdempotencyWindow,
			"how long Redis remembers a client event id; past it a retry is answered 202 and the ledger decides it "+
				"(duplicate, or rejected key_reused), never counting it twice"),
		&ucli.BoolFlag{Name: "ledger-check", EnvVars: []string{"TALLY_INTAKE_LEDGER_CHECK"},
			Usage: "past --idempotency-window, ask the ledger whether a new vote's event id is new before enqueueing it " +
				"(a retry then answers its status, a reused key 409, at once), at the cost of a PostgreSQL query shared " +
				"by concurrent votes of principals older than the window"},
		&ucli.StringSliceFlag{Name: "oidc-issuer", EnvVars: []string{"TALLY_INTAKE_OIDC_ISSUER"},
			Usage: "trust the tokens of the OpenID Connect issuer `URL` (as its tokens' iss spells it); repeat for several, " +
				"each with its --oidc-audience in the same order. Its keys are found by discovery, refreshed in the background " +
				"and kept while it does not answer; a subject's principal id is tally principal id --issuer URL --subject SUB"},
		&ucli.StringSliceFlag{Name: "oidc-audience", EnvVars: []string{"TALLY_INTAKE_OIDC_AUDIENCE"},
			Usage: "the audience (`AUD`) the tokens of the --oidc-issuer in the same position must name"},
		&ucli.StringSliceFlag{Name: "credential-key", EnvVars: []string{"TALLY_CREDENTIAL_KEY"},
			Usage: "a credential key `FILE` (tally credential key generate) whose tokens intake takes; repeat it for each key " +
				"that verifies (the old and new keys while rotating). The first signs the tokens POST /v1/principals issues"},
		&ucli.BoolFlag{Name: "add-admins-over-http", EnvVars: []string{"TALLY_INTAKE_ADD_ADMINS_OVER_HTTP"},
			Usage: "let an admin add admins through POST /v1/principals (their tokens expire no later than its own); " +
				"default: that route adds voters only, and admins are added with tally principal add --role admin"},
		&ucli.StringSliceFlag{Name: "oidc-admin-claim", EnvVars: []string{"TALLY_INTAKE_OIDC_ADMIN_CLAIM"},
			Usage: "`CLAIM=VALUE` of the --oidc-issuer in the same position: a token of that issuer whose CLAIM is VALUE, " +
				"or an array holding it (groups=tally-admins), is an admin's, who may use the admin routes; give one for each " +
				"issuer, - for an issuer none of whose tokens is an admin's (default: none is, of any issuer)"},
		&ucli.IntFlag{Name: "redis-wait-replicas", EnvVars: []string{"TALLY_INTAKE_REDIS_WAIT_REPLICAS"}, Value: def.WaitReplicas,
			Usage: "answer 202 only after WAIT confirmed the vote on `N` replicas (0: off)"},
		intakeDuration("redis-wait-timeout", "TALLY_INTAKE_REDIS_WAIT_TIMEOUT", def.WaitTimeout,
			"how long WAIT may take; unconfirmed votes get 503"),
		&ucli.IntFlag{Name: "enqueue-pipelines", EnvVars: []string{"TALLY_INTAKE_ENQUEUE_PIPELINES"}, Value: def.EnqueuePipelines,
			Usage: "Redis pipelines of votes under way at once; votes arriving meanwhile share the next one"},
		&ucli.IntFlag{Name: "enqueue-batch", EnvVars: []string{"TALLY_INTAKE_ENQUEUE_BATCH"}, Value: def.EnqueueBatch,
			Usage: "most votes in one Redis pipeline"},
	}
}

// intakeLookupFlags bound the calls intake makes and set its caches of
// results and polls and its circuit breaker.
func intakeLookupFlags(def intake.Config) []ucli.Flag {
	return []ucli.Flag{
		intakeDuration("request-timeout", "TALLY_INTAKE_REQUEST_TIMEOUT", def.RequestTimeout, "bound on the work of one request"),
		intakeDuration("redis-timeout", "TALLY_INTAKE_REDIS_TIMEOUT", def.RedisTimeout, "bound on one Redis round trip"),
		intakeDuration("postgres-timeout", "TALLY_INTAKE_POSTGRES_TIMEOUT", def.PostgresTimeout, "bound on one PostgreSQL query"),
		intakeDuration("read-cache-ttl", "TALLY_INTAKE_READ_CACHE_TTL", def.ReadCacheTTL,
			"how long a poll's results and the answer of /readyz are reused (one PostgreSQL query per poll per period)"),
		intakeDuration("catalog-refresh", "TALLY_INTAKE_CATALOG_REFRESH", def.CatalogRefresh,
			"period of the check of the catalog's change log (one indexed query when nothing changed), beside LISTEN tally_catalog"),
		intakeDuration("catalog-load-timeout", "TALLY_INTAKE_CATALOG_LOAD_TIMEOUT", def.CatalogLoadTimeout,
			"bound on the wait for the catalog's first load at start (read in pages, each under --postgres-timeout); past it intake serves, not ready, and goes on loading"),
		&ucli.IntFlag{Name: "breaker-failures", EnvVars: []string{"TALLY_INTAKE_BREAKER_FAILURES"}, Value: def.BreakerFailures,
			Usage: "consecutive Redis failures that open the circuit breaker"},
		intakeDuration("breaker-open-for", "TALLY_INTAKE_BREAKER_OPEN_FOR", def.BreakerOpenFor,
			"how long the breaker stays open before a trial request"),
	}
}

// intakeLimitFlags are the limits intake keeps in memory, which stand
// between a flood and PostgreSQL: failed authentications per client
// address and reads per principal.
func intakeLimitFlags(def intake.Config) []ucli.Flag {
	return []ucli.Flag{
		&ucli.Float64Flag{Name: "auth-failure-rate", EnvVars: []string{"TALLY_INTAKE_AUTH_FAILURE_RATE"}, Value: def.AuthFailureRate,
			Usage: "failed authentications per second one client address may make, sustained; beyond them its requests get 429 " +
				"before their token is checked (the address is the connection's: behind a proxy, the proxy's; inf: off)"},
		&ucli.IntFlag{Name: "auth-failure-burst", EnvVars: []string{"TALLY_INTAKE_AUTH_FAILURE_BURST"}, Value: def.AuthFailureBurst,
			Usage: "failed authentications one client address may make at once before --auth-failure-rate applies"},
		&ucli.Float64Flag{Name: "read-rate", EnvVars: []string{"TALLY_INTAKE_READ_RATE"}, Value: def.ReadRate,
			Usage: "reads (event status, results) per second one principal may make, sustained; beyond them 429 (inf: off)"},
		&ucli.IntFlag{Name: "read-burst", EnvVars: []string{"TALLY_INTAKE_READ_BURST"}, Value: def.ReadBurst,
			Usage: "reads one principal may make at once before --read-rate applies"},
		&ucli.IntFlag{Name: "limit-entries", EnvVars: []string{"TALLY_INTAKE_LIMIT_ENTRIES"}, Value: def.LimitEntries,
			Usage: "most client addresses, and most principals, the in-memory limits track; beyond it entries are forgotten"},
	}
}

// intakeHTTPFlags are the HTTP server's limits and the shutdown bound.
func intakeHTTPFlags(def intake.Config) []ucli.Flag {
	return []ucli.Flag{
		intakeDuration("read-header-timeout", "TALLY_INTAKE_READ_HEADER_TIMEOUT", def.ReadHeaderTimeout, "HTTP server read header timeout"),
		intakeDuration("read-timeout", "TALLY_INTAKE_READ_TIMEOUT", def.ReadTimeout, "HTTP server read timeout"),
		intakeDuration("write-timeout", "TALLY_INTAKE_WRITE_TIMEOUT", def.WriteTimeout, "HTTP server write timeout"),
		intakeDuration("idle-timeout", "TALLY_INTAKE_IDLE_TIMEOUT", def.IdleTimeout,
			"how long a keep-alive connection may wait for its next request; a proxy in front should close idle connections sooner"),
		&ucli.IntFlag{Name: "max-conns", EnvVars: []string{"TALLY_INTAKE_MAX_CONNS"}, Value: def.MaxConns,
			Usage: "most connections open at once; more wait in the kernel's accept queue (keep it under ulimit -n)"},
		&ucli.IntFlag{Name: "max-conns-per-addr", EnvVars: []string{"TALLY_INTAKE_MAX_CONNS_PER_ADDR"}, Value: def.MaxConnsPerAddr,
			Usage: "most connections open at once from one client address (IPv6: one /64); beyond it 503 too-many-connections and closed " +
				"(over TLS: closed). 0: no bound, for an intake behind a proxy, whose connections all come from its addresses"},
		&ucli.IntFlag{Name: "max-header-bytes", EnvVars: []string{"TALLY_INTAKE_MAX_HEADER_BYTES"}, Value: def.MaxHeaderBytes,
			Usage: "most bytes of request headers"},
		intakeDuration("shutdown-timeout", "TALLY_INTAKE_SHUTDOWN_TIMEOUT", def.ShutdownTimeout,
			"bound on draining requests in flight at shutdown"),
	}
}

// intakeLiveFlags are the settings of the live results page and stream.
func intakeLiveFlags(def intake.Config) []ucli.Flag {
	return []ucli.Flag{
		&ucli.IntFlag{Name: "max-live-viewers", EnvVars: []string{"TALLY_INTAKE_MAX_LIVE_VIEWERS"}, Value: def.MaxLiveViewers,
			Usage: "most live result streams (GET /v1/polls/{poll_id}/live) open at once; beyond it 503 + Retry-After " +
				"(each holds one of --max-conns, and must stay below it; default half of it)"},
		&ucli.IntFlag{Name: "max-live-per-addr", EnvVars: []string{"TALLY_INTAKE_MAX_LIVE_PER_ADDR"}, Value: def.MaxLivePerAddr,
			Usage: "most live streams open at once from one client address (IPv6: one /64); beyond it 429 live-address-limit (0: no bound)"},
		&ucli.IntFlag{Name: "max-live-per-principal", EnvVars: []string{"TALLY_INTAKE_MAX_LIVE_PER_PRINCIPAL"}, Value: def.MaxLivePerPrincipal,
			Usage: "most live streams with a token open at once of one principal; beyond it 429 live-principal-limit (0: no bound)"},
		intakeDuration("live-heartbeat", "TALLY_INTAKE_LIVE_HEARTBEAT", def.LiveHeartbeat,
			"period of the comment a live stream sends while idle, so that proxies keep it open"),
		intakeDuration("live-interval", "TALLY_INTAKE_LIVE_INTERVAL", def.LiveInterval,
			"least time between two reads of a poll's results for its live streams (appends within it share one read)"),
	}
}

// runIntake is tally intake: it connects (waiting up to --startup-wait),
// checks the Redis version, listens, tells systemd it is ready (under
// Type=notify) and serves until ctx ends.
func runIntake(c *ucli.Context) error {
	log, err := logger(c)
	if err != nil {
		return err
	}
	cfg := intakeConfig(c)
	if (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == "") {
		return errors.New("--tls-cert and --tls-key go together: give both to serve HTTPS, or neither for plain HTTP")
	}
	issuers, err := oidcIssuers(c, log)
	if err != nil {
		return err
	}
	if cfg.Credentials, cfg.CredentialKeyIDs, err = credentials(c, issuers); err != nil {
		return err
	}
	if files := c.StringSlice("credential-key"); len(files) > 0 {
		k, err := credential.ReadKeyFile(files[0])
		if err != nil {
			return fmt.Errorf("--credential-key: %w", err)
		}
		cfg.TokenKey = &k
	}
	setupDaemon(log)
	cs, err := openConns(c, ledger.Config{Logger: log}, c.Duration(flagStartupWait.Name))
	if err != nil {
		return err
	}
	defer cs.close()
	if err := checkDaemonRole(c, cs.store, log, "intake"); err != nil {
		return err
	}
	if err := checkRedisVersion(c.Context, cs.rdb, log); err != nil {
		return err
	}
	srv, err := intake.New(cfg, cs.store, cs.rdb, cs.keys, log, newRegistry())
	if err != nil {
		return err
	}
	ln, admin, err := srv.Listen(c.Context)
	if err != nil {
		return err
	}
	notifyReady(c.Context, log, "intake")
	return srv.ServeAdmin(c.Context, ln, admin)
}

// intakeConfig is the intake.Config the flags describe.
func intakeConfig(c *ucli.Context) intake.Config {
	return intake.Config{
		Listen:              c.String("listen"),
		TLSCertFile:         c.String("tls-cert"),
		TLSKeyFile:          c.String("tls-key"),
		Rate:                c.Float64("rate"),
		Burst:               c.Int("burst"),
		MaxBacklog:          c.Int64("max-backlog"),
		BacklogRetryAfter:   c.Duration("backlog-retry-after"),
		IdempotencyWindow:   c.Duration("idempotency-window"),
		WaitReplicas:        c.Int("redis-wait-replicas"),
		WaitTimeout:         c.Duration("redis-wait-timeout"),
		EnqueuePipelines:    c.Int("enqueue-pipelines"),
		EnqueueBatch:        c.Int("enqueue-batch"),
		RequestTimeout:      c.Duration("request-timeout"),
		RedisTimeout:        c.Duration("redis-timeout"),
		PostgresTimeout:     c.Duration("postgres-timeout"),
		ReadCacheTTL:        c.Duration("read-cache-ttl"),
		CatalogRefresh:      c.Duration("catalog-refresh"),
		CatalogLoadTimeout:  c.Duration("catalog-load-timeout"),
		LedgerCheck:         c.Bool("ledger-check"),
		AuthFailureRate:     c.Float64("auth-failure-rate"),
		AuthFailureBurst:    c.Int("auth-failure-burst"),
		ReadRate:            c.Float64("read-rate"),
		ReadBurst:           c.Int("read-burst"),
		LimitEntries:        c.Int("limit-entries"),
		BreakerFailures:     c.Int("breaker-failures"),
		BreakerOpenFor:      c.Duration("breaker-open-for"),
		ReadHeaderTimeout:   c.Duration("read-header-timeout"),
		ReadTimeout:         c.Duration("read-timeout"),
		WriteTimeout:        c.Duration("write-timeout"),
		IdleTimeout:         c.Duration("idle-timeout"),
		MaxConns:            c.Int("max-conns"),
		MaxConnsPerAddr:     unbounded(c.Int("max-conns-per-addr")),
		AdminListen:         c.String("admin-listen"),
		AddAdminsOverHTTP:   c.Bool("add-admins-over-http"),
		MaxHeaderBytes:      c.Int("max-header-bytes"),
		ShutdownTimeout:     c.Duration("shutdown-timeout"),
		MaxLiveViewers:      liveViewers(c),
		MaxLivePerAddr:      unbounded(c.Int("max-live-per-addr")),
		MaxLivePerPrincipal: unbounded(c.Int("max-live-per-principal")),
		LiveHeartbeat:       c.Duration("live-heartbeat"),
		LiveInterval:        c.Duration("live-interval"),
	}
}

// credentials is the verifier of the tokens --credential-key's keys
// signed and of issuers', with the ids of those keys; nil when there are
// none (no token is taken then).
func credentials(c *ucli.Context, issuers []*credential.OIDCIssuer) (*credential.Verifier, []string, error) {
	files := c.StringSlice("credential-key")
	if len(files) == 0 && len(issuers) == 0 {
		return nil, nil, nil
	}
	keys := make([]credential.Key, len(files))
	ids := make([]string, len(files))
	for i, f := range files {
		k, err := credential.ReadKeyFile(f)
		if err != nil {
			return nil, nil, fmt.Errorf("--credential-key: %w", err)
		}
		keys[i], ids[i] = k, k.ID
	}
	set, err := credential.NewKeySet(keys...)
	if err != nil {
		return nil, nil, fmt.Errorf("--credential-key: %w", err)
	}
	return credential.NewVerifier(set, issuers...), ids, nil
}

// oidcIssuers are the issuers --oidc-issuer and --oidc-audience name, in
// pairs; they fetch nothing until they run.
func oidcIssuers(c *ucli.Context, log *slog.Logger) ([]*credential.OIDCIssuer, error) {
	urls, auds := c.StringSlice("oidc-issuer"), c.StringSlice("oidc-audience")
	if len(urls) != len(auds) {
		return nil, fmt.Errorf("%d --oidc-issuer and %d --oidc-audience: give one audience for each issuer, in the same order", len(urls), len(auds))
	}
	claims, err := adminClaims(urls, c.StringSlice("oidc-admin-claim"))
	if err != nil {
		return nil, err
	}
	issuers := make([]*credential.OIDCIssuer, len(urls))
	for i, u := range urls {
		iss, err := credential.NewOIDCIssuer(credential.OIDCConfig{Issuer: u, Audience: auds[i], Logger: log,
			AdminClaim: claims[i].claim, AdminValue: claims[i].value})
		if err != nil {
			return nil, fmt.Errorf("--oidc-issuer %s: %w", u, err)
		}
		issuers[i] = iss
	}
	return issuers, nil
}

// adminClaim is the claim and value that make a token of an issuer an
// admin's; zero for none.
type adminClaim struct{ claim, value string }

// adminClaims reads --oidc-admin-claim, one CLAIM=VALUE (or - for none)
// for each issuer of urls, in the same order, into the claim of each
// issuer; none given is no admin claim for any issuer. One claim is not
// taken for several issuers: each issuer names its own groups, and a
// claim that makes admins at one could at another.
func adminClaims(urls, given []string) ([]adminClaim, error) {
	claims := make([]adminClaim, len(urls))
	if len(given) == 0 {
		return claims, nil
	}
	if len(urls) == 0 {
		return nil, errors.New("--oidc-admin-claim needs an --oidc-issuer whose tokens carry the claim")
	}
	if len(given) != len(urls) {
		return nil, fmt.Errorf("%d --oidc-admin-claim for %d --oidc-issuer: give one for each issuer, in the same order, "+
			"- for an issuer none of whose tokens is an admin's", len(given), len(urls))
	}
	for i, v := range given {
		if v == "-" {
			continue
		}
		claim, value, ok := strings.Cut(v, "=")
		if !ok || claim == "" || value == "" {
			return nil, fmt.Errorf("--oidc-admin-claim %q: give CLAIM=VALUE, such as groups=tally-admins, or - for none", v)
		}
		claims[i] = adminClaim{claim, value}
	}
	return claims, nil
}

// liveViewers is --max-live-viewers, or 0 (half of --max-conns) when it is
// not set and --max-conns is: the flag's default is that of the default
// --max-conns.
func liveViewers(c *ucli.Context) int {
	if !c.IsSet("max-live-viewers") && c.IsSet("max-conns") {
		return 0
	}
	return c.Int("max-live-viewers")
}

// unbounded maps a bound flag's 0 (no bound) to intake.Config's -1;
// intake.Config takes 0 for the default.
func unbounded(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// checkRedisVersion refuses to start intake on a Redis older than 7.0,
// whose SET does not take NX and GET together: every vote would get 503.
// On a cluster every master is checked. Where INFO is not allowed it only
// warns.
func checkRedisVersion(ctx context.Context, rdb redis.UniversalClient, log *slog.Logger) error {
	var mu sync.Mutex
	var infos []string
	info := func(ctx context.Context, c *redis.Client) error {
		s, err := c.Info(ctx, "server").Result()
		mu.Lock()
		defer mu.Unlock()
		infos = append(infos, s)
		return err
	}
	var err error
	switch r := rdb.(type) {
	case *redis.ClusterClient:
		err = r.ForEachMaster(ctx, info)
	case *redis.Client: // one server, or Sentinel's master
		err = info(ctx, r)
	}
	if err != nil {
		log.LogAttrs(ctx, slog.LevelWarn, "cannot read the Redis version (INFO server); intake needs Redis 7.0 or later",
			slog.String("component", "intake"), slog.String("error", err.Error()))
		return nil
	}
	for _, info := range infos {
		version, major := redisVersion(info)
		if major == 0 {
			log.LogAttrs(ctx, slog.LevelWarn, "INFO server names no redis_version; intake needs Redis 7.0 or later",
				slog.String("component", "intake"))
			continue
		}
		if major < 7 {
			return fmt.Errorf("intake needs Redis 7.0 or later (its enqueue script uses SET ... NX GET), and --redis-url runs Redis %s: upgrade Redis", version)
		}
	}
	return nil
}

// redisVersion returns redis_version from an INFO reply and its major
// number, 0 when there is none.
func redisVersion(info string) (string, int) {
	for _, line := range strings.Split(info, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:")
		if !ok {
			continue
		}
		majorText, _, _ := strings.Cut(v, ".")
		major, err := strconv.Atoi(majorText)
		if err != nil {
			return v, 0
		}
		return v, major
	}
	return "", 0
}
