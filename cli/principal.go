package cli

import (
	"errors"
	"fmt"
	"time"

	ucli "github.com/urfave/cli/v2"

	"tally/ledger"
)

func principalCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "principal",
		Usage: "add, revoke and list principals (the authenticated identities that vote)",
		Subcommands: []*ucli.Command{
			{
				Name:      "add",
				Usage:     "add a principal; prints its bearer token alone on stdout, once (only its SHA-256 is kept)",
				ArgsUsage: "NAME",
				Flags:     commonFlags(),
				Action:    principalAdd,
			},
			{
				Name:      "revoke",
				Usage:     "revoke a principal's token; its ledger rows stay",
				ArgsUsage: "ID",
				Flags:     commonFlags(),
				Action:    principalRevoke,
			},
			{
				Name:   "list",
				Usage:  "list the principals",
				Flags:  commonFlags(formatFlag()),
				Action: principalList,
			},
		},
	}
}

// principalAdd is tally principal add NAME. The token goes alone to
// standard output, so a script can capture it; the rest to standard error.
func principalAdd(c *ucli.Context) error {
	if c.NArg() != 1 {
		return errors.New("give the principal's NAME, e.g. tally principal add ci-bot")
	}
	return withStore(c, func(store *ledger.Store) error {
		p, token, err := store.AddPrincipal(c.Context, c.Args().First())
		if err != nil {
			return err
		}
		fmt.Fprintln(c.App.Writer, token)
		fmt.Fprintf(c.App.ErrWriter, "added principal %s (%s); its token is on stdout and is not shown again\n", p.ID, p.Name)
		return nil
	})
}

// principalRevoke is tally principal revoke ID.
func principalRevoke(c *ucli.Context) error {
	if c.NArg() != 1 {
		return errors.New("give the principal ID to revoke (tally principal list shows them)")
	}
	return withStore(c, func(store *ledger.Store) error {
		if err := store.RevokePrincipal(c.Context, c.Args().First()); err != nil {
			if errors.Is(err, ledger.ErrNotFound) {
				return fmt.Errorf("no principal %s (tally principal list shows them)", c.Args().First())
			}
			return err
		}
		fmt.Fprintf(c.App.ErrWriter, "revoked principal %s\n", c.Args().First())
		return nil
	})
}

// principalJSON is a principal as tally principal list --format json
// writes it.
type principalJSON struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at"`
}

// principalList is tally principal list.
func principalList(c *ucli.Context) error {
	asJSON, err := outputJSON(c)
	if err != nil {
		return err
	}
	return withStore(c, func(store *ledger.Store) error {
		ps, err := store.Principals(c.Context)
		if err != nil {
			return err
		}
		if asJSON {
			out := make([]principalJSON, len(ps))
			for i, p := range ps {
				out[i] = principalJSON(p)
			}
			return writeJSON(c.App.Writer, out)
		}
		t := newTable(c.App.Writer, "ID", "NAME", "CREATED", "REVOKED")
		for _, p := range ps {
			t.row(p.ID, p.Name, p.CreatedAt.UTC().Format(time.RFC3339), fmtTimePtr(p.RevokedAt))
		}
		return t.flush()
	})
}
