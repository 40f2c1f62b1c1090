package cli

import (
	"strings"

	ucli "github.com/urfave/cli/v2"
)

// interspersed moves the positional arguments of the command a line names
// behind its flags, so "tally poll create lunch --title T" parses as well as
// "tally poll create --title T lunch" (urfave/cli/v2 stops reading flags at
// the first positional argument).
func interspersed(app *ucli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	out := []string{args[0]}
	cmds := app.Commands
	i := 1
	var cmd *ucli.Command
	// Walk the command path: leading tokens that name a (sub)command.
	for i < len(args) {
		next := findCommand(cmds, args[i])
		if next == nil {
			break
		}
		cmd = next
		cmds = next.Subcommands
		out = append(out, args[i])
		i++
	}
	if cmd == nil || len(cmd.Subcommands) > 0 {
		return args
	}
	var flags, positional []string
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			positional = append(positional, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			positional = append(positional, a)
			continue
		}
		flags = append(flags, a)
		if !strings.Contains(a, "=") && takesValue(cmd, strings.TrimLeft(a, "-")) && i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	out = append(out, flags...)
	if len(positional) > 0 {
		out = append(out, "--")
		out = append(out, positional...)
	}
	return out
}

func findCommand(cmds []*ucli.Command, name string) *ucli.Command {
	for _, c := range cmds {
		if c.Name == name {
			return c
		}
		for _, a := range c.Aliases {
			if a == name {
				return c
			}
		}
	}
	return nil
}

// takesValue reports whether the command's flag called name reads the next
// argument as its value (every flag but a boolean one).
func takesValue(cmd *ucli.Command, name string) bool {
	for _, f := range cmd.Flags {
		for _, n := range f.Names() {
			if n == name {
				_, isBool := f.(*ucli.BoolFlag)
				return !isBool
			}
		}
	}
	return false
}
