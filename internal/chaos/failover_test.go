package chaos_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"tally/internal/pause"
)

// postgres-failover: a primary with a synchronous streaming standby; mid
// load the primary stops at once (as a lost machine) and, a moment later,
// the standby is promoted, as a failover manager would. The daemons' URL
// names both servers with target_session_attrs=read-write, so they find
// the new primary without a restart; a batch whose commit answer was lost
// is applied again and answers duplicate. With synchronous replication no
// committed batch is lost: the scenario ends with the usual verification
// (nothing lost, nothing counted twice, rebuild agrees).
//
// It runs with the long profile only (make chaos): make test keeps one
// failover scenario, redis-cluster-failover-wait1, to stay within its time.
func TestPostgresFailover(t *testing.T) {
	scenario(t)
	if prof.name != "long" {
		t.Skip("runs with the long profile only (TALLY_CHAOS=long, make chaos); the short profile runs redis-cluster-failover-wait1")
	}
	c := newCluster(t, clusterOptions{intakes: 1, projectors: 2, privatePostgres: true, standby: true})
	const promoteAfter = time.Second // the failover manager's detection and decision
	run(t, c, "postgres-failover", 12*time.Second, func(ctx context.Context, ending func()) (int, string, error) {
		if !pause.For(ctx, between(2*time.Second, 3*time.Second)) {
			return 0, "", ctx.Err()
		}
		rec, err := c.watchRecovery(ctx)
		if err != nil {
			return 0, "", err
		}
		c.pg.Crash()
		killed := time.Now() // the primary is gone: pg_ctl stop -m immediate returned
		type times struct{ accepted, recorded string }
		watched := make(chan times, 1)
		go func() {
			a, r := rec.wait(ctx, killed, 60*time.Second)
			watched <- times{a, r}
		}()
		pause.For(ctx, promoteAfter)
		ending()
		c.standby.Promote()
		promoted := time.Since(killed)
		w := <-watched
		accepted, recorded := w.accepted, w.recorded
		t.Logf("postgres-failover: standby promoted %s after the primary stopped; first vote accepted %s and first recorded %s after the stop",
			promoted.Round(time.Millisecond), accepted, recorded)
		return 1, fmt.Sprintf("primary stop, standby promoted after %s (first 202 %s, first recorded %s after the stop)",
			promoteAfter, accepted, recorded), nil
	})
}

// recovery watches, from a fault on, for the first vote intake accepts
// after it (a stream entry whose id, a Redis time in ms, is later) and the
// first the projector records after it (a ledger row whose recorded_at is
// later: on the same machine, the same clock).
type recovery struct {
	c        *cluster
	accepted time.Time
	recorded time.Time
}

func (c *cluster) watchRecovery(context.Context) (*recovery, error) {
	return &recovery{c: c}, nil
}

// wait polls every 20ms until both have happened or limit has passed, and
// returns how long after from each came ("not within LIMIT" otherwise).
func (r *recovery) wait(ctx context.Context, from time.Time, limit time.Duration) (accepted, recorded string) {
	for time.Since(from) < limit && (r.accepted.IsZero() || r.recorded.IsZero()) {
		if r.accepted.IsZero() {
			for i := range shards {
				info, err := r.c.rdb.XInfoStream(ctx, r.c.keys.Stream(i)).Result()
				if err != nil {
					continue
				}
				ms, _, _ := strings.Cut(info.LastGeneratedID, "-")
				if n, err := strconv.ParseInt(ms, 10, 64); err == nil && n > from.UnixMilli() && r.accepted.IsZero() {
					r.accepted = time.UnixMilli(n)
				}
			}
		}
		if r.recorded.IsZero() {
			qctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			var first *time.Time
			if err := r.c.pool.QueryRow(qctx, `SELECT min(recorded_at) FROM poll_events WHERE recorded_at > $1`, from).Scan(&first); err == nil && first != nil {
				r.recorded = *first
			}
			cancel()
		}
		if !pause.For(ctx, 20*time.Millisecond) {
			break
		}
	}
	since := func(t time.Time) string {
		if t.IsZero() {
			return "not within " + limit.String()
		}
		return t.Sub(from).Round(10 * time.Millisecond).String()
	}
	return since(r.accepted), since(r.recorded)
}
