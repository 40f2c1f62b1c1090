package cli

import (
	"errors"

	ucli "github.com/urfave/cli/v2"
)

func intakeCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "intake",
		Usage: "run the HTTP intake daemon (not built yet)",
		Flags: commonFlags(),
		Action: func(*ucli.Context) error {
			return errors.New("intake is not built yet")
		},
	}
}
