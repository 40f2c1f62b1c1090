package cli

import (
	"strconv"
	"time"

	ucli "github.com/urfave/cli/v2"

	"tally/ledger"
)

// adminCommand is tally admin: the record of administrative actions.
func adminCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "admin",
		Usage: "the record of administrative actions (polls created and closed, principals added and revoked, keys retired)",
		Subcommands: []*ucli.Command{{
			Name:  "log",
			Usage: "print who changed the catalog, what and when, oldest first",
			Description: "Each change is recorded by the database itself, in the transaction that made it, whoever made it:\n" +
				"intake's admin routes (PRINCIPAL is the admin who asked), the CLI or psql (PRINCIPAL is empty; DB_USER\n" +
				"is the database login either way). The record refuses UPDATE, DELETE and TRUNCATE, as the ledger does.",
			Flags: commonFlags(formatFlag(),
				&ucli.Int64Flag{Name: "after", Usage: "print the actions after the one of this `ID` (to follow the log)"},
				&ucli.IntFlag{Name: "limit", Value: 1000, Usage: "print at most `N` actions"}),
			Action: adminLog,
		}},
	}
}

// adminLog is tally admin log.
func adminLog(c *ucli.Context) error {
	asJSON, err := outputJSON(c)
	if err != nil {
		return err
	}
	return withStore(c, func(store *ledger.Store) error {
		as, err := store.AdminActions(c.Context, c.Int64("after"), c.Int("limit"))
		if err != nil {
			return err
		}
		if asJSON {
			if as == nil {
				as = []ledger.AdminAction{}
			}
			return writeJSON(c.App.Writer, as)
		}
		t := newTable(c.App.Writer, "ID", "AT", "PRINCIPAL", "DB_USER", "ACTION", "TARGET", "DETAIL")
		for _, a := range as {
			t.row(strconv.FormatInt(a.ID, 10), a.At.UTC().Format(time.RFC3339Nano), a.PrincipalID, a.DBUser, a.Action, a.Target, string(a.Detail))
		}
		return t.flush()
	})
}
