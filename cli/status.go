package cli

import (
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	ucli "github.com/urfave/cli/v2"

	"tally/projector"
	"tally/stream"
)

func statusCommand() *ucli.Command {
	return &ucli.Command{
		Name:   "status",
		Usage:  "print, per stream shard, the backlog, pending entries, oldest pending age, consumers and dead letters",
		Flags:  redisFlags(formatFlag()),
		Action: runStatus,
	}
}

// runStatus prints the status of every stream shard, and their total when
// there are several.
func runStatus(c *ucli.Context) error {
	asJSON, err := outputJSON(c)
	if err != nil {
		return err
	}
	var st projector.Status
	err = withRedis(c, func(rdb redis.UniversalClient, keys stream.Keys) error {
		st, err = projector.Inspect(c.Context, rdb, keys)
		return err
	})
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(c.App.Writer, st)
	}
	t := newTable(c.App.Writer, "SHARD", "BACKLOG", "PENDING", "OLDEST PENDING", "OLDEST UNDELIVERED", "CONSUMERS", "DEAD LETTERS")
	row := func(name string, s projector.ShardStatus) {
		age, waiting := "-", "-"
		if s.Pending > 0 {
			age = s.OldestPending.Round(time.Millisecond).String()
		}
		if s.OldestUndelivered > 0 {
			waiting = s.OldestUndelivered.Round(time.Millisecond).String()
		}
		consumers := strconv.FormatInt(s.Consumers, 10)
		if !s.GroupExists {
			consumers = "no group"
		}
		t.row(name, strconv.FormatInt(s.Backlog, 10), strconv.FormatInt(s.Pending, 10), age, waiting, consumers, strconv.FormatInt(s.DeadLetters, 10))
	}
	for _, s := range st.Shards {
		row(strconv.Itoa(s.Shard), s)
	}
	if len(st.Shards) > 1 {
		row("total", st.Total)
	}
	return t.flush()
}
