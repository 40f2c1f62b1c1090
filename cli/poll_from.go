package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	ucli "github.com/urfave/cli/v2"

	"tally/intake"
	"tally/ledger"
)

// This file owns tally poll create --from FILE: many polls from JSON
// lines, each the body of POST /v1/polls, read as that route reads it
// (intake.ParsePoll) and made ledger.MaxPollsPerCreate a transaction
// (ledger.Store.EnsurePolls), each line answered as the route answers
// its poll.

// maxPollLine bounds a line of the file: the admin routes' body bound.
const maxPollLine = 4 << 20

// pollLine is one line of the file and what became of it.
type pollLine struct {
	n    int // its number in the file, from 1
	poll ledger.Poll
	err  error // why it was refused, before or by the ledger
	made bool
}

// pollCreateFrom is tally poll create --from FILE. It prints one line per
// poll: "LINE ID created", "LINE ID exists" (as asked), or "LINE ID
// refused: why"; it exits 1 when any was refused.
func pollCreateFrom(c *ucli.Context) error {
	if c.NArg() != 0 {
		return errors.New("--from takes each poll's id from its line: give no ID")
	}
	for _, f := range pollCreateFlags() {
		if name := f.Names()[0]; name != "from" && c.IsSet(name) {
			return fmt.Errorf("--%s describes one poll; with --from each line describes its own: leave --%s out", name, name)
		}
	}
	path := c.String("from")
	in := c.App.Reader
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("--from: %w", err)
		}
		defer f.Close()
		in = f
	}
	return withStore(c, func(store *ledger.Store) error {
		start := time.Now()
		var made, existed, refused int
		report := func(lines []pollLine) {
			for _, l := range lines {
				switch {
				case l.err != nil:
					refused++
					fmt.Fprintf(c.App.Writer, "%d %s refused: %v\n", l.n, orDash(l.poll.ID), l.err)
				case l.made:
					made++
					fmt.Fprintf(c.App.Writer, "%d %s created\n", l.n, l.poll.ID)
				default:
					existed++
					fmt.Fprintf(c.App.Writer, "%d %s exists\n", l.n, l.poll.ID)
				}
			}
		}
		err := readPollLines(in, func(lines []pollLine) error {
			if err := ensurePollLines(c, store, lines); err != nil {
				return err
			}
			report(lines)
			return nil
		})
		if err != nil {
			return fmt.Errorf("--from %s: %w (the polls of the lines reported above are made)", path, err)
		}
		took := time.Since(start)
		fmt.Fprintf(c.App.ErrWriter, "%d polls created, %d existed as asked, %d refused, in %s (%.0f lines/s)\n",
			made, existed, refused, took.Round(time.Millisecond), float64(made+existed+refused)/took.Seconds())
		if refused > 0 {
			return checkFailed(fmt.Errorf("%d of %d polls refused", refused, made+existed+refused))
		}
		return nil
	})
}

// readPollLines reads the polls of in and hands them to batch, at most
// ledger.MaxPollsPerCreate parsed ones at a time, blank lines skipped.
func readPollLines(in io.Reader, batch func([]pollLine) error) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), maxPollLine)
	var lines []pollLine
	valid := 0
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		p, err := intake.ParsePoll(sc.Bytes())
		lines = append(lines, pollLine{n: n, poll: p, err: err})
		if err == nil {
			valid++
		}
		if valid == ledger.MaxPollsPerCreate {
			if err := batch(lines); err != nil {
				return err
			}
			lines, valid = nil, 0
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("a line is longer than %d bytes: split the poll's eligibility list", maxPollLine)
		}
		return err
	}
	if len(lines) == 0 {
		return nil
	}
	return batch(lines)
}

// ensurePollLines makes the polls of lines that parsed, in one
// transaction, and notes each one's outcome.
func ensurePollLines(c *ucli.Context, store *ledger.Store, lines []pollLine) error {
	var polls []ledger.Poll
	var at []int
	for i, l := range lines {
		if l.err == nil {
			polls, at = append(polls, l.poll), append(at, i)
		}
	}
	if len(polls) == 0 {
		return nil
	}
	outcomes, err := store.EnsurePolls(c.Context, polls)
	if err != nil {
		return err
	}
	for k, o := range outcomes {
		l := &lines[at[k]]
		l.made, l.err = o.Created, o.Err
	}
	return nil
}
