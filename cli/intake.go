package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
	ucli "github.com/urfave/cli/v2"

	"tally/credential"
	"tally/intake"
	"tally/ledger"
)

func intakeCommand() *ucli.Command { return intakeCommandRunning(runIntake) }

// intakeCommandRunning is tally intake with the action run, given the
// intake.Config its flags make and the flags of its fields.
func intakeCommandRunning(run func(c *ucli.Context, cfg intake.Config, fields map[string]string) error) *ucli.Command {
	cfg := intake.DefaultConfig()
	bound := intakeFlags(&cfg)
	fields := boundFields(&cfg, bound)
	flags := append([]ucli.Flag{startupWaitFlag(), allowSuperuserFlag(), &flagCredentialKeys, &flagOIDCIssuer,
		&flagOIDCAudience, &flagOIDCAdminClaim}, bound...)
	return &ucli.Command{
		Name:  "intake",
		Usage: "run the HTTP intake daemon: authenticate, validate, rate-limit and enqueue votes",
		Description: "intake serves POST /v1/votes, GET /v1/votes/{event_id}, GET /v1/polls/{poll_id}/results, " +
			"the live results page GET /polls/{poll_id} and its stream GET /v1/polls/{poll_id}/live, " +
			"/healthz, /readyz and /metrics. It answers 202 only after Redis acknowledged the vote. " +
			"SIGTERM or SIGINT stops it: it stops accepting, drains the requests in flight within " +
			"--shutdown-timeout and exits 0.",
		Flags:  redisFlags(flags...),
		Action: func(c *ucli.Context) error { return run(c, intakeConfig(c, cfg, fields), fields) },
	}
}

// The flags of tally intake that are not intake.Config fields: the keys
// and issuers it builds its verifier of credentials from.
var (
	flagOIDCIssuer = ucli.StringSliceFlag{Name: "oidc-issuer", EnvVars: []string{"TALLY_INTAKE_OIDC_ISSUER"},
		Usage: "trust the tokens of the OpenID Connect issuer `URL` (as its tokens' iss spells it); repeat for several, " +
			"each with its --oidc-audience in the same order. Its keys are found by discovery, refreshed in the background " +
			"and kept while it does not answer; a subject's principal id is tally principal id --issuer URL --subject SUB"}
	flagOIDCAudience = ucli.StringSliceFlag{Name: "oidc-audience", EnvVars: []string{"TALLY_INTAKE_OIDC_AUDIENCE"},
		Usage: "the audience (`AUD`) the tokens of the --oidc-issuer in the same position must name"}
	flagCredentialKeys = ucli.StringSliceFlag{Name: "credential-key", EnvVars: []string{"TALLY_CREDENTIAL_KEY"},
		Usage: "a credential key `FILE` (tally credential key generate) whose tokens intake takes; repeat it for each key " +
			"that verifies (the old and new keys while rotating). The first signs the tokens POST /v1/principals issues"}
	flagOIDCAdminClaim = ucli.StringSliceFlag{Name: "oidc-admin-claim", EnvVars: []string{"TALLY_INTAKE_OIDC_ADMIN_CLAIM"},
		Usage: "`CLAIM=VALUE` of the --oidc-issuer in the same position: a token of that issuer whose CLAIM is VALUE, " +
			"or an array holding it (groups=tally-admins), is an admin's, who may use the admin routes; give one for each " +
			"issuer, - for an issuer none of whose tokens is an admin's (default: none is, of any issuer)"}
)

// intakeSettings binds tally intake's flags to intake.Config.
var intakeSettings = settings{env: "TALLY_INTAKE_"}

// intakeFlags are the flags bound to the fields of cfg, whose values are
// their defaults.
func intakeFlags(cfg *intake.Config) []ucli.Flag {
	return slices.Concat(intakeEnqueueFlags(cfg), intakeLookupFlags(cfg), intakeLimitFlags(cfg), intakeHTTPFlags(cfg), intakeLiveFlags(cfg))
}

// intakeEnqueueFlags are the flags of the vote path: where intake listens,
// the rate limit, the backlog bound, idempotency and the Redis pipelines.
func intakeEnqueueFlags(cfg *intake.Config) []ucli.Flag {
	return []ucli.Flag{
		intakeSettings.string("listen", &cfg.Listen, "TCP `ADDR`ess to serve HTTP on"),
		intakeSettings.string("admin-listen", &cfg.AdminListen, "also serve GET /healthz, /readyz and /metrics on `ADDR` (plain HTTP, keep it private), apart from --listen's bounds, "+
			"so probes and scrapes are answered while the data routes are saturated; --listen then serves no /metrics"),
		intakeSettings.bool("pprof", &cfg.Pprof, "also serve the Go runtime's profiles (net/http/pprof) under /debug/pprof/ on --admin-listen, "+
			"which it needs, to clients on the loopback interface only"),
		intakeSettings.string("tls-cert", &cfg.TLSCertFile,
			"serve HTTPS (TLS 1.2+, HTTP/2) with the PEM certificate chain in `FILE`, reloaded when it changes; needs --tls-key"),
		intakeSettings.string("tls-key", &cfg.TLSKeyFile, "PEM private key of --tls-cert in `FILE`, reloaded when it changes"),
		intakeSettings.float64("rate", &cfg.Rate, "votes per second one principal may enqueue, sustained"),
		intakeSettings.int("burst", &cfg.Burst, "votes one principal may enqueue at once before --rate applies"),
		intakeSettings.int64("max-backlog", &cfg.MaxBacklog, "entries one stream shard may hold; beyond it votes get 503 + Retry-After"),
		intakeSettings.duration("backlog-retry-after", &cfg.BacklogRetryAfter,
			"Retry-After of a refusal for a full backlog"),
		intakeSettings.duration("idempotency-window", &cfg.IdempotencyWindow,
			"how long Redis remembers a client event id; past it a retry is answered 202 and the ledger decides it "+
				"(duplicate, or rejected key_reused), never counting it twice"),
		intakeSettings.bool("ledger-check", &cfg.LedgerCheck, "past --idempotency-window, ask the ledger whether a new vote's event id is new before enqueueing it "+
			"(a retry then answers its status, a reused key 409, at once), at the cost of a PostgreSQL query shared "+
			"by concurrent votes of principals older than the window"),
		intakeSettings.bool("add-admins-over-http", &cfg.AddAdminsOverHTTP, "let an admin add admins through POST /v1/principals (their tokens expire no later than its own); "+
			"default: that route adds voters only, and admins are added with tally principal add --role admin"),
		intakeSettings.int("redis-wait-replicas", &cfg.WaitReplicas, "answer 202 only after WAIT confirmed the vote on `N` replicas (0: off)"),
		intakeSettings.duration("redis-wait-timeout", &cfg.WaitTimeout,
			"how long WAIT may take; unconfirmed votes get 503"),
		intakeSettings.int("enqueue-pipelines", &cfg.EnqueuePipelines, "Redis pipelines of votes under way at once; votes arriving meanwhile share the next one"),
		intakeSettings.int("enqueue-batch", &cfg.EnqueueBatch, "most votes in one Redis pipeline"),
	}
}

// intakeLookupFlags bound the calls intake makes and set its caches of
// results and polls and its circuit breaker.
func intakeLookupFlags(cfg *intake.Config) []ucli.Flag {
	return []ucli.Flag{
		intakeSettings.duration("request-timeout", &cfg.RequestTimeout, "bound on the work of one request"),
		intakeSettings.duration("redis-timeout", &cfg.RedisTimeout, "bound on one Redis round trip"),
		intakeSettings.duration("postgres-timeout", &cfg.PostgresTimeout, "bound on one PostgreSQL query"),
		intakeSettings.duration("read-cache-ttl", &cfg.ReadCacheTTL,
			"how long a poll's results and the answer of /readyz are reused (one PostgreSQL query per poll per period)"),
		intakeSettings.duration("catalog-refresh", &cfg.CatalogRefresh,
			"period of the check of the catalog's change log (one indexed query when nothing changed), beside LISTEN tally_catalog"),
		intakeSettings.duration("catalog-load-timeout", &cfg.CatalogLoadTimeout,
			"bound on the wait for the catalog's first load at start (read in pages, each under --postgres-timeout); past it intake serves, not ready, and goes on loading"),
		intakeSettings.int("breaker-failures", &cfg.BreakerFailures, "consecutive Redis failures that open the circuit breaker"),
		intakeSettings.duration("breaker-open-for", &cfg.BreakerOpenFor,
			"how long the breaker stays open before a trial request"),
	}
}

// intakeLimitFlags are the limits intake keeps in memory, which stand
// between a flood and PostgreSQL: failed authentications per client
// address and reads per principal.
func intakeLimitFlags(cfg *intake.Config) []ucli.Flag {
	return []ucli.Flag{
		intakeSettings.float64("auth-failure-rate", &cfg.AuthFailureRate, "failed authentications per second one client address may make, sustained; beyond them its requests get 429 "+
			"before their token is checked (the address is the connection's: behind a proxy, the proxy's; inf: off)"),
		intakeSettings.int("auth-failure-burst", &cfg.AuthFailureBurst, "failed authentications one client address may make at once before --auth-failure-rate applies"),
		intakeSettings.float64("read-rate", &cfg.ReadRate, "reads (event status, results) per second one principal may make, sustained; beyond them 429 (inf: off)"),
		intakeSettings.int("read-burst", &cfg.ReadBurst, "reads one principal may make at once before --read-rate applies"),
		intakeSettings.int("limit-entries", &cfg.LimitEntries, "most client addresses, and most principals, the in-memory limits track; beyond it entries are forgotten"),
	}
}

// intakeHTTPFlags are the HTTP server's limits and the shutdown bound.
func intakeHTTPFlags(cfg *intake.Config) []ucli.Flag {
	return []ucli.Flag{
		intakeSettings.duration("read-header-timeout", &cfg.ReadHeaderTimeout, "HTTP server read header timeout"),
		intakeSettings.duration("read-timeout", &cfg.ReadTimeout, "HTTP server read timeout"),
		intakeSettings.duration("write-timeout", &cfg.WriteTimeout, "HTTP server write timeout"),
		intakeSettings.duration("idle-timeout", &cfg.IdleTimeout,
			"how long a keep-alive connection may wait for its next request; a proxy in front should close idle connections sooner"),
		intakeSettings.int("max-conns", &cfg.MaxConns, "most connections open at once; more wait in the kernel's accept queue (keep it under ulimit -n)"),
		intakeSettings.int("max-conns-per-addr", &cfg.MaxConnsPerAddr, "most connections open at once from one client address (IPv6: one /64); beyond it 503 too-many-connections and closed "+
			"(over TLS: closed). -1: no bound, for an intake behind a proxy, whose connections all come from its addresses"),
		intakeSettings.int("max-header-bytes", &cfg.MaxHeaderBytes, "most bytes of request headers"),
		intakeSettings.duration("shutdown-timeout", &cfg.ShutdownTimeout,
			"bound on draining requests in flight at shutdown"),
	}
}

// intakeLiveFlags are the settings of the live results page and stream.
func intakeLiveFlags(cfg *intake.Config) []ucli.Flag {
	return []ucli.Flag{
		intakeSettings.int("max-live-viewers", &cfg.MaxLiveViewers, "most live result streams (GET /v1/polls/{poll_id}/live) open at once; beyond it 503 + Retry-After "+
			"(each holds one of --max-conns, and must stay below it; default half of it)"),
		intakeSettings.int("max-live-per-addr", &cfg.MaxLivePerAddr, "most live streams open at once from one client address (IPv6: one /64); beyond it 429 live-address-limit (-1: no bound)"),
		intakeSettings.int("max-live-per-principal", &cfg.MaxLivePerPrincipal, "most live streams with a token open at once of one principal; beyond it 429 live-principal-limit (-1: no bound)"),
		intakeSettings.duration("live-heartbeat", &cfg.LiveHeartbeat,
			"period of the comment a live stream sends while idle, so that proxies keep it open"),
		intakeSettings.duration("live-interval", &cfg.LiveInterval,
			"least time between two reads of a poll's results for its live streams (appends within it share one read)"),
		intakeSettings.duration("live-idle", &cfg.LiveIdle,
			"how long the listener of the live streams (one PostgreSQL connection) outlives the last stream"),
	}
}

// runIntake is tally intake: it checks cfg (the flags bound to it; fields
// maps its fields to their flags) before it connects anywhere, reads the
// credential keys, connects (waiting up to --startup-wait), checks the
// Redis version, listens, tells systemd it is ready (under Type=notify)
// and serves until ctx ends.
func runIntake(c *ucli.Context, cfg intake.Config, fields map[string]string) error {
	log, err := logger(c)
	if err != nil {
		return err
	}
	if err := checkSettings(c, &cfg, intake.DefaultConfig(), fields, cfg.Validate); err != nil {
		return err
	}
	issuers, err := oidcIssuers(c, log)
	if err != nil {
		return err
	}
	if cfg.Credentials, cfg.CredentialKeyIDs, err = credentials(c, issuers); err != nil {
		return err
	}
	if files := c.StringSlice(flagCredentialKeys.Name); len(files) > 0 {
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
		return flagErrors(err, fields)
	}
	ln, admin, err := srv.Listen(c.Context)
	if err != nil {
		return err
	}
	notifyReady(c.Context, log, "intake")
	return srv.ServeAdmin(c.Context, ln, admin)
}

// intakeConfig is cfg, the intake.Config tally intake's flags are bound
// to, with --max-live-viewers left to its default, half of --max-conns,
// when only --max-conns is given.
func intakeConfig(c *ucli.Context, cfg intake.Config, fields map[string]string) intake.Config {
	if !c.IsSet(flagName(fields, "MaxLiveViewers")) && c.IsSet(flagName(fields, "MaxConns")) {
		cfg.MaxLiveViewers = 0
	}
	return cfg
}

// flagName is the name of the flag fields binds to field; it panics when
// there is none, which every run of the command would show.
func flagName(fields map[string]string, field string) string {
	name, ok := fields[field]
	if !ok {
		panic("no flag is bound to field " + field)
	}
	return name
}

// credentials is the verifier of the tokens --credential-key's keys
// signed and of issuers', with the ids of those keys; nil when there are
// none (no token is taken then).
func credentials(c *ucli.Context, issuers []*credential.OIDCIssuer) (*credential.Verifier, []string, error) {
	files := c.StringSlice(flagCredentialKeys.Name)
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
	urls, auds := c.StringSlice(flagOIDCIssuer.Name), c.StringSlice(flagOIDCAudience.Name)
	if len(urls) != len(auds) {
		return nil, fmt.Errorf("%d --oidc-issuer and %d --oidc-audience: give one audience for each issuer, in the same order", len(urls), len(auds))
	}
	claims, err := adminClaims(urls, c.StringSlice(flagOIDCAdminClaim.Name))
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
