package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"tally/ledger"
)

// This file owns what the commands say when a connection cannot be made
// or its answer will not change by waiting: a URL checked before any
// connection (its scheme), passwords kept out of messages, and the
// refusals of PostgreSQL and Redis that are final (a missing database, a
// refused login, TLS on one side only, a Redis of another mode), each with
// what to fix.

// redactURL hides the password of a connection URL for messages. A URL
// net/url cannot parse (several host:port, as a primary and its standby)
// has its password cut out by pattern.
func redactURL(raw string) string {
	if !urlScheme.MatchString(raw) {
		// PostgreSQL's keyword/value form: host=HOST password=SECRET.
		return keywordPassword.ReplaceAllString(raw, "${1}xxxxx")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return userinfoPassword.ReplaceAllString(raw, "${1}:xxxxx@")
	}
	return u.Redacted()
}

// keywordPassword is the password of PostgreSQL's keyword/value form,
// quoted or not.
var keywordPassword = regexp.MustCompile(`(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// userinfoPassword is the password of a URL's user info: scheme://user:PASSWORD@.
var userinfoPassword = regexp.MustCompile(`^([a-z][a-z0-9+.-]*://[^:@/]*):[^@/]*@`)

// unreachablePostgres is the error of a failed connection to dbURL: the
// hint of a refused login, or the question whether the server runs.
func unreachablePostgres(dbURL string, err error) error {
	var refused finalError
	if errors.As(err, &refused) {
		return fmt.Errorf("PostgreSQL at %s refused the connection: %w", redactURL(dbURL), err)
	}
	return fmt.Errorf("cannot reach PostgreSQL at %s: %w (is it running? set --database-url or TALLY_DATABASE_URL)", redactURL(dbURL), err)
}

// finalError is a server's answer that trying again will not change (a
// database that does not exist, a password refused), with what to do
// about it: waitFor does not try again.
type finalError struct {
	err  error
	hint string
}

func (e finalError) Error() string { return e.err.Error() + ": " + e.hint }

func (e finalError) Unwrap() error { return e.err }

// isFinal reports an error waitFor must not try again.
func isFinal(err error) bool {
	var wrong wrongModeError
	var final finalError
	return errors.As(err, &wrong) || errors.As(err, &final)
}

// loginRefused makes a finalError of PostgreSQL's refusal of the login
// (ledger's predicates tell them): a database that does not exist, a role
// that may not log in or does not exist, a wrong password. Any other error
// is returned as it is.
func loginRefused(err error) error {
	switch {
	case ledger.IsMissingDatabase(err):
		return finalError{err, "tally migrate up creates a missing database, or fix the database's name in --database-url (or TALLY_DATABASE_URL)"}
	case ledger.IsLoginRefused(err):
		return finalError{err, "fix the user name in --database-url (or TALLY_DATABASE_URL), or create that role and let pg_hba.conf admit it " +
			"(docs/operations.md, \"Running the daemons with least privilege\")"}
	case ledger.IsPasswordRefused(err):
		return finalError{err, "fix the password in --database-url (or TALLY_DATABASE_URL, PGPASSWORD, ~/.pgpass)"}
	}
	return err
}

// urlScheme is the scheme a URL starts with, and the "//" after it.
var urlScheme = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*):(//)?`)

// checkScheme refuses a URL of flag whose scheme is not one of schemes,
// or lacks its "//", naming the scheme written and the form to write
// (example). A value without a scheme passes when keywordForm (PostgreSQL's
// "host=... dbname=..."), unless it holds "//" (a scheme without its ':').
func checkScheme(flag, raw string, schemes []string, keywordForm bool, example string) error {
	m := urlScheme.FindStringSubmatch(raw)
	before, _, slashes := strings.Cut(raw, "//")
	switch {
	case m == nil && slashes && !strings.Contains(before, "="): // not a keyword's value
		return fmt.Errorf("%s has no scheme (it holds // but does not start with NAME://): write %s", flag, example)
	case m == nil && !keywordForm:
		return fmt.Errorf("%s has no scheme: write %s", flag, example)
	case m == nil:
		return nil
	case !slices.Contains(schemes, m[1]):
		return fmt.Errorf("%s starts with %q, which is not a scheme it takes (%s://): write %s",
			flag, m[1]+":", strings.Join(schemes, "://, "), example)
	case m[2] == "":
		return fmt.Errorf("%s starts with %q without the // that follows it: write %s", flag, m[1]+":", example)
	}
	return nil
}

// checkRedisScheme refuses a --redis-url whose scheme is none of
// go-redis'.
func checkRedisScheme(redisURL string) error {
	return checkScheme("--redis-url", redisURL, []string{"redis", "rediss", "unix"}, false,
		"redis://HOST:6379/0 (rediss:// for Redis over TLS, unix:///PATH for a socket)")
}

// checkDatabaseScheme refuses a --database-url whose scheme is not
// PostgreSQL's, which pgx would report as a keyword/value string it
// cannot parse.
func checkDatabaseScheme(dbURL string) error {
	return checkScheme("--database-url", dbURL, []string{"postgres", "postgresql"}, true,
		"postgres://USER@HOST:5432/DATABASE?sslmode=disable (or keyword/value: host=HOST dbname=DATABASE)")
}

// wrongModeError is a Redis that answers, but is not the deployment
// --redis-mode names; waitFor does not try it again.
type wrongModeError struct{ msg string }

func (e wrongModeError) Error() string { return e.msg }

// modeMismatch turns the error of a first PING into a wrongModeError when
// it shows that the server is not of mode's kind.
func modeMismatch(mode string, err error) error {
	msg := err.Error()
	switch {
	case mode == redisCluster && strings.Contains(msg, "cluster support disabled"):
		return wrongModeError{"it is not a Redis Cluster node (" + msg + "): use --redis-mode single for one server, " +
			"or name a cluster node"}
	case mode == redisSentinel && strings.Contains(msg, "unknown command 'sentinel'"):
		return wrongModeError{"it is not a Sentinel (" + msg + "): with --redis-mode sentinel, --redis-url names the " +
			"sentinels (port 26379 by default), not the master; use --redis-mode single for one server"}
	}
	return err
}

// redisAuthRefused makes a finalError of Redis' refusal of the login: a
// wrong user or password (WRONGPASS), or none given to a server that
// requires one (NOAUTH). Any other error is returned as it is.
func redisAuthRefused(err error) error {
	switch {
	case redis.HasErrorPrefix(err, "WRONGPASS"):
		return finalError{err, "fix the user name or password in --redis-url (redis://USER:PASSWORD@HOST:6379/0, or TALLY_REDIS_URL)"}
	case redis.HasErrorPrefix(err, "NOAUTH"):
		return finalError{err, "the server requires a password: give it in --redis-url (redis://:PASSWORD@HOST:6379/0, or TALLY_REDIS_URL)"}
	}
	return err
}

// redisAddr is the host:port of rawURL, Redis's port when it names none,
// when its scheme is scheme.
func redisAddr(rawURL, scheme string) (string, bool) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != scheme {
		return "", false
	}
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), "6379"), true
	}
	return u.Host, true
}

// plainNotTLS returns a finalError when rawURL is a rediss:// (TLS) URL
// and its server answers a plain-text PING: the scheme is one letter too
// many, and a TLS handshake with that server would only time out. It
// returns nil otherwise, leaving any other fault to the PING that follows.
func plainNotTLS(ctx context.Context, rawURL string) error {
	addr, ok := redisAddr(rawURL, "rediss")
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	reply := make([]byte, 1)
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return nil
	}
	if _, err := io.ReadFull(conn, reply); err != nil || (reply[0] != '+' && reply[0] != '-') {
		return nil
	}
	return finalError{fmt.Errorf("the server at %s answers without TLS", addr),
		"rediss:// is Redis over TLS: write redis:// in --redis-url (or TALLY_REDIS_URL)"}
}

// tlsNotPlain returns a finalError when rawURL is a redis:// URL whose
// PING failed and whose server completes a TLS handshake: the scheme lacks
// its s. It returns nil otherwise.
func tlsNotPlain(ctx context.Context, rawURL string) error {
	addr, ok := redisAddr(rawURL, "redis")
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	// Only whether the server speaks TLS is asked: its certificate is
	// the real client's to check, with rediss://.
	d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil
	}
	conn.Close()
	return finalError{fmt.Errorf("the server at %s speaks TLS", addr),
		"redis:// is Redis without TLS: write rediss:// in --redis-url (or TALLY_REDIS_URL)"}
}
