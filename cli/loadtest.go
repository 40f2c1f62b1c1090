package cli

import (
	"errors"

	ucli "github.com/urfave/cli/v2"
)

func loadtestCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "loadtest",
		Usage: "send synthetic authorized load and verify exactly-once (not built yet)",
		Flags: commonFlags(),
		Action: func(*ucli.Context) error {
			return errors.New("loadtest is not built yet")
		},
	}
}
