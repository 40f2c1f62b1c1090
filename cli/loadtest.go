package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"tally/internal/loadtest"
	"tally/ledger"
	"tally/vote"
)

func loadtestCommand() *ucli.Command {
	env := func(name string) []string { return []string{"TALLY_LOADTEST_" + name} }
	share := func(name, envName string, value float64, what string) *ucli.Float64Flag {
		return &ucli.Float64Flag{Name: name, EnvVars: env(envName), Value: value,
			Usage: "fraction (0 to 1) of the votes that are " + what}
	}
	return &ucli.Command{
		Name:  "loadtest",
		Usage: "send synthetic authorized votes to intake, then verify against the ledger that none was lost or counted twice",
		Description: "loadtest creates its own polls (lt-<random>-<round>) and --principals principals in the ledger\n" +
			"(their tokens, signed with --credential-key, which every target must take, stay in memory), sends --votes votes (or sends for --duration) to POST /v1/votes at\n" +
			"--rate votes per second (0: as fast as --concurrency allows), with shares of exact retries, key\n" +
			"reuse and second responses. A vote that gets no answer is sent again with the same key; 429 and\n" +
			"503 are sent again after their Retry-After. It then waits for the Redis backlog to drain and\n" +
			"verifies against the ledger: every 202 ends recorded or rejected for the expected reason, the\n" +
			"tallies equal its ground truth, rebuild equals the projection. Progress goes to stderr, the\n" +
			"report to stdout. At the end it closes its polls and revokes its tokens.\n\n" +
			"Exit 0: verified; 1: an invariant failed (the report names it); 2: an error. The first Ctrl-C\n" +
			"stops sending and still verifies what was sent; the second one kills it.\n\n" +
			"intake rate-limits each principal (tally intake --rate, --burst): spread the load over enough\n" +
			"principals, or raise intake's limits, or the report shows 429s.",
		Flags: redisFlags(
			&flagCredentialKey,
			&ucli.StringSliceFlag{Name: "target", EnvVars: env("TARGET"),
				Usage: "base `URL` of intake, e.g. http://127.0.0.1:8080; repeat it to spread the votes over several"},
			&ucli.IntFlag{Name: "votes", EnvVars: env("VOTES"),
				Usage: fmt.Sprintf("send `N` votes (at most %d); give this or --duration", loadtest.MaxVotes)},
			&ucli.DurationFlag{Name: "duration", EnvVars: env("DURATION"),
				Usage: fmt.Sprintf("send for this long (at most %s); give this or --votes", loadtest.MaxDuration)},
			&ucli.Float64Flag{Name: "rate", EnvVars: env("RATE"),
				Usage: "votes per second to send (0: as fast as it can)"},
			&ucli.IntFlag{Name: "concurrency", EnvVars: env("CONCURRENCY"), Value: 32,
				Usage: "votes under way at once, and keep-alive connections per target"},
			&ucli.IntFlag{Name: "principals", EnvVars: env("PRINCIPALS"), Value: 1000,
				Usage: "principals to create; each answers each poll once"},
			&ucli.IntFlag{Name: "poll-choices", EnvVars: env("POLL_CHOICES"), Value: 4,
				Usage: "choices of each poll (2 to 64; ranked: to 16)"},
			&ucli.StringFlag{Name: "kind", EnvVars: env("KIND"), Value: "single",
				Usage: "the polls' ballot `KIND`: single, multiple (at most 2 choices), approve, score (0-5, budget 8) or ranked; every kind but single is sent as a ballot"},
			&ucli.StringFlag{Name: "answers", EnvVars: env("ANSWERS"), Value: "final",
				Usage: "the polls' answers `MODE`: final, or latest (a second response replaces the principal's ballot; the one counted is its last in the log)"},
			share("retry-share", "RETRY_SHARE", 0.05, "exact retries of an accepted vote (same key, same payload: 202 again, one effect)"),
			share("key-reuse-share", "KEY_REUSE_SHARE", 0.02, "key reuse (an accepted key with another candidate: 409, no effect)"),
			share("second-response-share", "SECOND_RESPONSE_SHARE", 0.05,
				"second responses (a new key from a principal already accepted in the poll: rejected already_responded)"),
			&ucli.BoolFlag{Name: "allow-reorder", EnvVars: env("ALLOW_REORDER"),
				Usage: "accept that the ledger counted a principal's second response instead of the first (several projectors, or projectors killed)"},
			&ucli.DurationFlag{Name: "drain-timeout", EnvVars: env("DRAIN_TIMEOUT"), Value: 2 * time.Minute,
				Usage: "how long to wait for the backlog to drain before verifying"},
			&ucli.DurationFlag{Name: "request-timeout", EnvVars: env("REQUEST_TIMEOUT"), Value: 10 * time.Second,
				Usage: "bound on one HTTP request; a request without an answer is sent again"},
			&ucli.IntFlag{Name: "max-attempts", EnvVars: env("MAX_ATTEMPTS"), Value: 20,
				Usage: "most requests for one vote (no answer, 429 and 503 are sent again)"},
			&ucli.StringFlag{Name: "poll-prefix", EnvVars: env("POLL_PREFIX"),
				Usage: "`PREFIX` of the poll ids (default lt-<random>)"},
			&ucli.Uint64Flag{Name: "seed", EnvVars: env("SEED"),
				Usage: "seed of the choice of votes (0: random)"},
			&ucli.StringFlag{Name: "format", EnvVars: env("FORMAT"), Value: "table",
				Usage: "report format: table or json"},
			&ucli.BoolFlag{Name: "quiet", EnvVars: env("QUIET"),
				Usage: "no progress lines on stderr"},
		),
		Action: runLoadtest,
	}
}

// runLoadtest is tally loadtest: check the flags, connect, set up, send,
// drain, verify, report; its polls and tokens are closed on the way out.
func runLoadtest(c *ucli.Context) error {
	asJSON, err := outputJSON(c)
	if err != nil {
		return err
	}
	log, err := logger(c)
	if err != nil {
		return err
	}
	// Check the flags before connecting anywhere.
	cfg, err := loadtestConfig(c, log)
	if err != nil {
		return err
	}
	key, err := signingKey(c)
	if err != nil {
		return err
	}
	cs, err := openConns(c, ledger.Config{Logger: log}, 0)
	if err != nil {
		return err
	}
	defer cs.close()
	s, err := loadtest.New(cfg, loadtest.Deps{Store: cs.store, Queue: loadtest.RedisQueue(cs.rdb, cs.keys), Key: &key})
	if err != nil {
		return err
	}
	// After the first Ctrl-C, stop sending but still drain and verify.
	after := context.WithoutCancel(c.Context)
	defer func() {
		cctx, cancel := context.WithTimeout(after, time.Minute)
		defer cancel()
		if err := s.Close(cctx); err != nil {
			log.Warn("loadtest could not close all its polls and tokens", "error", err.Error())
		}
	}()
	rep, interrupted, err := loadtestSession(c, s, cfg, after)
	if err != nil {
		return err
	}
	return reportLoadtest(c.App.Writer, rep, interrupted, asJSON)
}

// loadtestConfig is the loadtest.Config the flags describe, validated.
func loadtestConfig(c *ucli.Context, log *slog.Logger) (loadtest.Config, error) {
	var votes int
	if c.IsSet("votes") {
		if votes = c.Int("votes"); votes <= 0 {
			return loadtest.Config{}, fmt.Errorf("--votes %d: give a positive number of votes", votes)
		}
	}
	if c.IsSet("duration") && c.Duration("duration") <= 0 {
		return loadtest.Config{}, fmt.Errorf("--duration %s: give a positive duration", c.Duration("duration"))
	}
	cfg := loadtest.Config{
		Targets:             c.StringSlice("target"),
		Votes:               votes,
		Duration:            c.Duration("duration"),
		Rate:                c.Float64("rate"),
		Concurrency:         c.Int("concurrency"),
		Principals:          c.Int("principals"),
		PollChoices:         c.Int("poll-choices"),
		Kind:                vote.Kind(c.String("kind")),
		Answers:             vote.Answers(c.String("answers")),
		RetryShare:          c.Float64("retry-share"),
		KeyReuseShare:       c.Float64("key-reuse-share"),
		SecondResponseShare: c.Float64("second-response-share"),
		AllowReorder:        c.Bool("allow-reorder"),
		DrainTimeout:        c.Duration("drain-timeout"),
		RequestTimeout:      c.Duration("request-timeout"),
		MaxAttempts:         c.Int("max-attempts"),
		PollPrefix:          c.String("poll-prefix"),
		Seed:                c.Uint64("seed"),
		Logger:              log,
	}
	if !c.Bool("quiet") {
		stderr := c.App.ErrWriter
		cfg.Progress = func(p loadtest.Progress) { printProgress(stderr, p) }
	}
	if err := cfg.Validate(); err != nil {
		return loadtest.Config{}, err
	}
	return cfg, nil
}

// loadtestSession sets up and sends on c's context, then drains and
// verifies on after, which outlives the first Ctrl-C; interrupted says
// that Ctrl-C cut the sending short.
func loadtestSession(c *ucli.Context, s *loadtest.Session, cfg loadtest.Config, after context.Context) (rep loadtest.Report, interrupted bool, err error) {
	ctx, stderr := c.Context, c.App.ErrWriter
	if err := s.Setup(ctx); err != nil {
		return rep, false, err
	}
	if !c.Bool("quiet") {
		fmt.Fprintf(stderr, "loadtest: polls %s-*, %d principals; sending to %s\n", s.PollPrefix(), cfg.Principals, strings.Join(cfg.Targets, ", "))
	}
	if err := s.Send(ctx); err != nil {
		if !errors.Is(err, context.Canceled) || ctx.Err() == nil {
			return rep, false, err
		}
		interrupted = true
		fmt.Fprintln(stderr, "loadtest: interrupted: no more votes are sent; draining and verifying what was sent (Ctrl-C again to kill)")
	}
	if err := s.Drain(after); err != nil {
		return rep, interrupted, err
	}
	rep, err = s.Verify(after)
	return rep, interrupted, err
}

// reportLoadtest writes the report to w and exits 1 when a check failed.
func reportLoadtest(w io.Writer, rep loadtest.Report, interrupted, asJSON bool) error {
	if asJSON {
		if err := writeJSON(w, rep); err != nil {
			return err
		}
	} else if err := printLoadtestReport(w, rep, interrupted); err != nil {
		return err
	}
	if !rep.Passed() {
		return checkFailed(fmt.Errorf("loadtest: %d checks failed", len(rep.Failures())))
	}
	return nil
}

func printProgress(w io.Writer, p loadtest.Progress) {
	q := "backlog ?"
	if p.Queue != nil {
		q = fmt.Sprintf("backlog %d, pending %d", p.Queue.Backlog, p.Queue.Pending)
	}
	fmt.Fprintf(w, "loadtest: %-9s %6.1fs  sent %d  accepted %d  %.0f/s  requests %d  %s\n",
		p.Phase, p.Elapsed.Seconds(), p.Sent, p.Accepted, p.Rate, p.Requests, q)
}

// printLoadtestReport prints the report for a person.
func printLoadtestReport(w io.Writer, r loadtest.Report, interrupted bool) error {
	t := newTable(w, "LOADTEST", r.PollPrefix)
	t.row("polls", strconv.Itoa(r.Polls))
	t.row("principals", strconv.Itoa(r.Principals))
	t.row("attempted", fmt.Sprintf("%d  (%s)", r.Attempted, byKind(r.AttemptedByKind)))
	t.row("requests", strconv.FormatInt(r.Requests, 10))
	t.row("accepted (202)", fmt.Sprintf("%d  (%s)", r.Accepted, byKind(r.AcceptedByKind)))
	t.row("accepted events", strconv.FormatInt(r.AcceptedEvents, 10))
	for _, k := range sortedKeys(r.Refused) {
		t.row("refused "+k, strconv.FormatInt(r.Refused[k], 10))
	}
	for _, k := range sortedKeys(r.Retried) {
		t.row("retried after "+k, strconv.FormatInt(r.Retried[k], 10))
	}
	t.row("uncertain (no answer)", strconv.FormatInt(r.Uncertain, 10))
	t.row("recorded", strconv.FormatInt(r.Recorded, 10))
	t.row("duplicates absorbed", strconv.FormatInt(r.DuplicatesAbsorbed, 10))
	for _, k := range sortedKeys(r.Rejected) {
		t.row("rejected: "+k, strconv.FormatInt(r.Rejected[k], 10))
	}
	t.row("lost", mustBeZero(r.Lost))
	t.row("counted twice", mustBeZero(r.CountedTwice))
	if r.Reordered > 0 {
		t.row("reordered", strconv.FormatInt(r.Reordered, 10))
	}
	t.row("throughput", fmt.Sprintf("%.0f accepted/s over %.1fs", r.Throughput, r.SendDuration.Seconds()))
	t.row("accept latency", latency(r.AcceptLatency))
	t.row("accept-to-recorded latency", latency(r.RecordLatency))
	drained := fmt.Sprintf("yes, in %.1fs", r.DrainDuration.Seconds())
	if !r.Drained {
		drained = fmt.Sprintf("NO, gave up after %.1fs", r.DrainDuration.Seconds())
	}
	t.row("drained", drained)
	t.row("dead-lettered", strconv.FormatInt(r.DeadLettered, 10))
	result := "PASS"
	if !r.Passed() {
		result = "FAIL"
	}
	if interrupted {
		result += " (interrupted: fewer votes than asked)"
	}
	t.row("result", result)
	if err := t.flush(); err != nil {
		return err
	}
	for _, f := range r.Failures() {
		if _, err := fmt.Fprintln(w, "FAIL:", f); err != nil {
			return err
		}
	}
	return nil
}

func byKind(m map[string]int64) string {
	var parts []string
	for _, k := range []string{"first_response", "second_response", "exact_retry", "key_reuse"} {
		parts = append(parts, fmt.Sprintf("%s %d", strings.ReplaceAll(k, "_", " "), m[k]))
	}
	return strings.Join(parts, ", ")
}

func mustBeZero(n int64) string {
	if n == 0 {
		return "0"
	}
	return strconv.FormatInt(n, 10) + "  MUST BE 0"
}

func latency(l loadtest.Latency) string {
	if l.Count == 0 {
		return "-"
	}
	ms := func(d time.Duration) string {
		return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 1, 64) + "ms"
	}
	return fmt.Sprintf("p50 %s  p99 %s  max %s  (%d)", ms(l.P50), ms(l.P99), ms(l.Max), l.Count)
}

func sortedKeys(m map[string]int64) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
