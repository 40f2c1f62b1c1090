package cli

import (
	"errors"

	ucli "github.com/urfave/cli/v2"
)

func notYet(name, usage string) *ucli.Command {
	return &ucli.Command{Name: name, Usage: usage, Flags: commonFlags(),
		Action: func(*ucli.Context) error { return errors.New(name + " is not built yet") }}
}

func rebuildCommand() *ucli.Command {
	return notYet("rebuild", "recompute tallies from the ledger and diff")
}
func exportCommand() *ucli.Command    { return notYet("export", "write the ledger as JSON lines") }
func importCommand() *ucli.Command    { return notYet("import", "append JSON-lines events") }
func pollCommand() *ucli.Command      { return notYet("poll", "manage polls") }
func principalCommand() *ucli.Command { return notYet("principal", "manage principals") }
