package cli

import (
	"errors"

	ucli "github.com/urfave/cli/v2"
)

func projectorCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "projector",
		Usage: "run the projector daemon (not built yet)",
		Flags: commonFlags(),
		Action: func(*ucli.Context) error {
			return errors.New("projector is not built yet")
		},
	}
}

func deadletterCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "deadletter",
		Usage: "inspect and replay dead-lettered stream entries (not built yet)",
		Flags: commonFlags(),
		Action: func(*ucli.Context) error {
			return errors.New("deadletter is not built yet")
		},
	}
}

func statusCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "status",
		Usage: "print backlog, pending entries and dead letters (not built yet)",
		Flags: commonFlags(),
		Action: func(*ucli.Context) error {
			return errors.New("status is not built yet")
		},
	}
}
