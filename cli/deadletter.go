package cli

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	ucli "github.com/urfave/cli/v2"

	"tally/projector"
	"tally/stream"
)

func deadletterCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "deadletter",
		Usage: "inspect, replay and purge the entries the projector could not apply",
		Description: "The projector moves an entry it cannot apply (undecodable, fingerprint mismatch, failing in the\n" +
			"ledger, delivered too often, or deleted while pending) to its shard's dead-letter stream with the\n" +
			"reason. ID is the dead-letter stream id as list shows it, SHARD/ID or the bare ID.",
		Subcommands: []*ucli.Command{
			{
				Name:  "list",
				Usage: "list dead letters, oldest first",
				Flags: redisFlags(
					&ucli.IntFlag{Name: "limit", EnvVars: []string{"TALLY_DEADLETTER_LIMIT"}, Value: 100, Usage: "show at most `N` (0: all)"},
					formatFlag(),
				),
				Action: deadletterList,
			},
			{
				Name:      "show",
				Usage:     "print one dead letter with all its fields",
				ArgsUsage: "ID",
				Flags:     redisFlags(formatFlag()),
				Action:    deadletterShow,
			},
			{
				Name:      "replay",
				Usage:     "enqueue dead letters on their main stream again, and remove them from the dead-letter stream",
				ArgsUsage: "ID... | --all",
				Flags:     redisFlags(allFlag()),
				Action:    deadletterReplay,
			},
			{
				Name:      "purge",
				Usage:     "delete dead letters for good (needs --yes)",
				ArgsUsage: "ID... | --all",
				Flags: redisFlags(allFlag(),
					&ucli.BoolFlag{Name: "yes", Usage: "really delete; without it purge only says what it would delete"}),
				Action: deadletterPurge,
			},
		},
	}
}

// allFlag is a fresh --all per command: urfave/cli keeps a flag's value in
// the flag.
func allFlag() ucli.Flag {
	return &ucli.BoolFlag{Name: "all", Usage: "every dead letter of every shard"}
}

// withDeadLetters runs run on the dead-letter streams the flags name.
func withDeadLetters(c *ucli.Context, run func(*projector.DeadLetters) error) error {
	return withRedis(c, func(rdb redis.UniversalClient, keys stream.Keys) error {
		return run(projector.NewDeadLetters(rdb, keys))
	})
}

// deadletterRefs returns the IDs given as arguments, or all when --all is
// set; one of the two, not both.
func deadletterRefs(c *ucli.Context, verb string) ([]string, bool, error) {
	args := c.Args().Slice()
	all := c.Bool("all")
	switch {
	case all && len(args) > 0:
		return nil, false, fmt.Errorf("%s: give IDs or --all, not both", verb)
	case !all && len(args) == 0:
		return nil, false, fmt.Errorf("%s: give the IDs to %s (see tally deadletter list), or --all", verb, verb)
	}
	return args, all, nil
}

// deadletterList prints up to --limit dead letters, oldest first.
func deadletterList(c *ucli.Context) error {
	asJSON, err := outputJSON(c)
	if err != nil {
		return err
	}
	return withDeadLetters(c, func(dl *projector.DeadLetters) error {
		ds, err := dl.List(c.Context, c.Int("limit"))
		if err != nil {
			return err
		}
		if asJSON {
			if ds == nil {
				ds = []projector.DeadLetter{}
			}
			return writeJSON(c.App.Writer, ds)
		}
		if len(ds) == 0 {
			fmt.Fprintln(c.App.ErrWriter, "no dead letters")
			return nil
		}
		t := newTable(c.App.Writer, "ID", "REASON", "POLL", "PRINCIPAL", "TIME")
		for _, d := range ds {
			principal, _, poll := d.Original()
			t.row(d.Ref(), string(d.Reason), orDash(poll), orDash(principal), d.Time.Format(time.RFC3339))
		}
		return t.flush()
	})
}

// deadletterShow prints one dead letter with every field.
func deadletterShow(c *ucli.Context) error {
	asJSON, err := outputJSON(c)
	if err != nil {
		return err
	}
	if c.NArg() != 1 {
		return errors.New("show: give one ID (see tally deadletter list)")
	}
	return withDeadLetters(c, func(dl *projector.DeadLetters) error {
		d, err := dl.Get(c.Context, c.Args().First())
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(c.App.Writer, d)
		}
		t := newTable(c.App.Writer, "FIELD", "VALUE")
		t.row("id", d.Ref())
		t.row("reason", string(d.Reason))
		t.row("error", d.Error)
		t.row("stream", d.Stream)
		t.row("stream id", d.StreamID)
		t.row("consumer", d.Consumer)
		t.row("time", d.Time.Format(time.RFC3339Nano))
		t.row("deliveries", strconv.FormatInt(d.Deliveries, 10))
		for _, k := range slices.Sorted(maps.Keys(d.Fields)) {
			t.row("field "+k, d.Fields[k])
		}
		return t.flush()
	})
}

// deadletterReplay enqueues the dead letters named (or all) on their main
// stream again.
func deadletterReplay(c *ucli.Context) error {
	ids, all, err := deadletterRefs(c, "replay")
	if err != nil {
		return err
	}
	return withDeadLetters(c, func(dl *projector.DeadLetters) error {
		var out []string
		if all {
			out, err = dl.ReplayAll(c.Context)
		} else {
			out, err = dl.Replay(c.Context, ids...)
		}
		fmt.Fprintf(c.App.Writer, "replayed %d dead letters\n", len(out))
		return err
	})
}

// deadletterPurge deletes the dead letters named (or all), with --yes;
// without it, it says what it would delete and fails.
func deadletterPurge(c *ucli.Context) error {
	ids, all, err := deadletterRefs(c, "purge")
	if err != nil {
		return err
	}
	return withDeadLetters(c, func(dl *projector.DeadLetters) error {
		if !c.Bool("yes") {
			return purgeRefused(c, dl, ids, all)
		}
		var n int
		if all {
			n, err = dl.PurgeAll(c.Context)
		} else {
			n, err = dl.Purge(c.Context, ids...)
		}
		fmt.Fprintf(c.App.Writer, "purged %d dead letters\n", n)
		return err
	})
}

// purgeRefused is purge's answer without --yes: what it would delete, as
// an error, or nil when --all finds nothing to delete.
func purgeRefused(c *ucli.Context, dl *projector.DeadLetters, ids []string, all bool) error {
	what := strings.Join(ids, " ")
	if all {
		ds, err := dl.List(c.Context, 0)
		if err != nil {
			return err
		}
		if len(ds) == 0 {
			fmt.Fprintln(c.App.ErrWriter, "no dead letters")
			return nil
		}
		what = fmt.Sprintf("all %d dead letters", len(ds))
	}
	return fmt.Errorf("purge deletes %s for good, and nothing can bring them back: add --yes to do it", what)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
