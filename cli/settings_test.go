package cli

import (
	"bytes"
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	ucli "github.com/urfave/cli/v2"

	"tally/intake"
	"tally/projector"
)

// TestEveryConfigFieldHasOneFlag: every field of intake.Config and
// projector.Config is bound to exactly one flag of its daemon (but those
// built from other flags, named here), and every flag made for a Config
// is bound to one of its fields. A setting is so declared once: no flag
// name is read as a string, so a typo in one cannot read zero.
func TestEveryConfigFieldHasOneFlag(t *testing.T) {
	t.Parallel()
	icfg, pcfg := intake.DefaultConfig(), projector.DefaultConfig()
	for _, tc := range []struct {
		daemon string
		cfg    any
		flags  []ucli.Flag
		// unbound are the fields built from other flags: the credential
		// verifier and keys from --credential-key and --oidc-*, the log
		// signer from --log-key.
		unbound []string
	}{
		{"intake", &icfg, intakeFlags(&icfg), []string{"Credentials", "CredentialKeyIDs", "TokenKey"}},
		{"projector", &pcfg, projectorFlags(&pcfg), []string{"LogSigner"}},
	} {
		v := reflect.ValueOf(tc.cfg).Elem()
		byAddr := map[uintptr]string{}
		for i := range v.NumField() {
			byAddr[v.Field(i).Addr().Pointer()] = v.Type().Field(i).Name
		}
		flagsOf := map[string][]string{}
		for _, fl := range tc.flags {
			p, ok := destination(fl)
			field, known := byAddr[p]
			if !ok || !known {
				t.Errorf("%s: flag --%s is bound to no field of its Config", tc.daemon, fl.Names()[0])
				continue
			}
			flagsOf[field] = append(flagsOf[field], fl.Names()[0])
		}
		unbound := map[string]bool{}
		for _, f := range tc.unbound {
			if _, ok := v.Type().FieldByName(f); !ok {
				t.Errorf("%s: %s is named as a field built from other flags, but its Config has no such field", tc.daemon, f)
			}
			unbound[f] = true
		}
		for i := range v.NumField() {
			name := v.Type().Field(i).Name
			switch n := len(flagsOf[name]); {
			case unbound[name] && n != 0:
				t.Errorf("%s: %s is built from other flags, yet bound to %v", tc.daemon, name, flagsOf[name])
			case !unbound[name] && n != 1:
				t.Errorf("%s: field %s is bound to %d flags %v, want exactly one", tc.daemon, name, n, flagsOf[name])
			}
		}
		if fields := boundFields(tc.cfg, tc.flags); len(fields) != v.NumField()-len(tc.unbound) {
			t.Errorf("%s: boundFields finds %d fields, want %d", tc.daemon, len(fields), v.NumField()-len(tc.unbound))
		}
	}
}

// TestBadFlagRefusedBeforeConnecting runs each daemon with a bad value
// of each flag its Config checks, against closed loopback ports and with
// a long --startup-wait: each must exit 2 at once, naming the flag in the
// first line of what it says and what the flag takes, before any
// connection is tried (the deadline of the context bounds a run that
// would wait for the servers instead; its error names no flag).
func TestBadFlagRefusedBeforeConnecting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		daemon, flag, value, want string
	}{
		{"intake", "rate", "-1", "must be above 0 and at most 1000000"},
		{"intake", "burst", "0", "0 is not a value of its own"},
		{"intake", "burst", "2000000", "must be between 1 and 1000000"},
		{"intake", "max-backlog", "-5", "at least 1 entry"},
		{"intake", "idempotency-window", "1ms", "at least 1s"},
		{"intake", "redis-wait-replicas", "-1", "0 (off) or more"},
		{"intake", "enqueue-pipelines", "2000", "between 1 and 1024"},
		{"intake", "enqueue-batch", "-1", "between 1 and 10000"},
		{"intake", "breaker-failures", "-1", "at least 1"},
		{"intake", "auth-failure-rate", "0.0001", "between 0.001 and 1000000, or +Inf"},
		{"intake", "auth-failure-burst", "-1", "between 1 and 1000000"},
		{"intake", "read-rate", "-3", "between 0.001 and 1000000, or +Inf"},
		{"intake", "read-burst", "2000000", "between 1 and 1000000"},
		{"intake", "limit-entries", "-1", "at least 1"},
		{"intake", "backlog-retry-after", "-1s", "must not be negative"},
		{"intake", "redis-wait-timeout", "-1s", "must not be negative"},
		{"intake", "request-timeout", "-1s", "must not be negative"},
		{"intake", "request-timeout", "1m", "must not exceed the write timeout"},
		{"intake", "redis-timeout", "-1s", "must not be negative"},
		{"intake", "postgres-timeout", "-1s", "must not be negative"},
		{"intake", "read-cache-ttl", "-1s", "must not be negative"},
		{"intake", "catalog-refresh", "-1s", "must not be negative"},
		{"intake", "catalog-load-timeout", "-1s", "must not be negative"},
		{"intake", "breaker-open-for", "-1s", "must not be negative"},
		{"intake", "read-header-timeout", "-1s", "must not be negative"},
		{"intake", "read-timeout", "-1s", "must not be negative"},
		{"intake", "write-timeout", "-1s", "must not be negative"},
		{"intake", "idle-timeout", "-1s", "must not be negative"},
		{"intake", "shutdown-timeout", "-1s", "must not be negative"},
		{"intake", "live-idle", "-1s", "must not be negative"},
		{"intake", "live-heartbeat", "10ms", "at least 100ms"},
		{"intake", "live-interval", "2m", "between 1ms and 1m"},
		{"intake", "max-conns", "-1", "at least 1"},
		{"intake", "max-conns-per-addr", "-2", "or -1 for no bound"},
		{"intake", "max-live-per-addr", "-2", "or -1 for no bound"},
		{"intake", "max-live-per-principal", "-2", "or -1 for no bound"},
		{"intake", "max-live-viewers", "20000", "below the connection bound"},
		{"intake", "max-header-bytes", "10", "at least 1024 bytes"},
		{"intake", "tls-cert", "cert.pem", "go together"},
		{"projector", "batch-size", "-1", "at least 1"},
		{"projector", "batch-wait", "-1s", "must not be negative"},
		{"projector", "workers", "17", "between 1 and 16"},
		{"projector", "min-idle", "1us", "at least 1ms"},
		{"projector", "claim-interval", "-1s", "must be positive"},
		{"projector", "max-deliveries", "-1", "at least 1"},
		{"projector", "max-attempts", "-1", "at least 1"},
		{"projector", "backoff-min", "-1s", "must be positive"},
		{"projector", "backoff-max", "1ms", "at least the least backoff"},
		{"projector", "apply-timeout", "-1s", "must be positive"},
		{"projector", "breaker-failures", "-1", "at least 1"},
		{"projector", "breaker-open-for", "-1s", "must be positive"},
		{"projector", "shutdown-grace", "-1s", "must not be negative"},
		{"projector", "stats-interval", "-1s", "must be positive"},
		{"projector", "checkpoint-interval", "-1s", "must be positive"},
	} {
		r := runBounded(t, 20*time.Second, tc.daemon, "--database-url", "postgres://postgres@127.0.0.1:1/none",
			"--redis-url", "redis://127.0.0.1:1/0", "--startup-wait", "1m", "--"+tc.flag, tc.value)
		first, _, _ := strings.Cut(r.stderr, "\n")
		if r.code != ExitError || !strings.Contains(first, "--"+tc.flag+":") || !strings.Contains(r.stderr, tc.want) ||
			strings.Contains(r.stderr, "cannot reach") {
			t.Errorf("tally %s --%s %s: exit %d, stderr %q; want exit 2 naming --%s and saying %q, before connecting",
				tc.daemon, tc.flag, tc.value, r.code, r.stderr, tc.flag, tc.want)
		}
	}
}

// runBounded runs tally with args under a context that ends after d.
func runBounded(t *testing.T, d time.Duration, args ...string) run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	runMu.Lock()
	defer runMu.Unlock()
	var out, errOut bytes.Buffer
	code := Run(ctx, append([]string{"tally"}, args...), strings.NewReader(""), &out, &errOut)
	return run{code, out.String(), errOut.String()}
}
