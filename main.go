// Command tally is an event-sourced ledger for low-risk polls. See README.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"tally/cli"
)

func main() {
	// The first signal cancels ctx (a soft stop: daemons drain); the
	// second one kills the process the default way. The soft stop's time
	// bound belongs to each command (intake --shutdown-timeout, projector
	// --shutdown-grace, loadtest --drain-timeout), so no timer here cuts
	// it shorter.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	os.Exit(cli.Run(ctx, os.Args, os.Stdin, os.Stdout, os.Stderr))
}
