package cli

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"tally/ledger"
)

func pollCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "poll",
		Usage: "create, close, list and show polls",
		Subcommands: []*ucli.Command{
			{
				Name:      "create",
				Usage:     "create a poll with its choices",
				ArgsUsage: "ID",
				Flags:     commonFlags(pollCreateFlags()...),
				Action:    pollCreate,
			},
			{
				Name:      "close",
				Usage:     "close a poll: events received from then on are rejected as poll_closed",
				ArgsUsage: "ID",
				Flags:     commonFlags(&ucli.StringFlag{Name: "at", Usage: "RFC 3339 `TIME` to close at (default: now)"}),
				Action:    pollClose,
			},
			{
				Name:   "list",
				Usage:  "list the polls",
				Flags:  commonFlags(formatFlag()),
				Action: pollList,
			},
			{
				Name:      "show",
				Usage:     "show a poll and its tallies",
				ArgsUsage: "ID",
				Flags:     commonFlags(formatFlag()),
				Action:    pollShow,
			},
		},
	}
}

func pollCreateFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "title", Required: true, Usage: "the question, for people"},
		&ucli.StringSliceFlag{Name: "choice", Required: true, Usage: "a candidate `ID`; repeat for each"},
		&ucli.StringFlag{Name: "opens-at", Usage: "RFC 3339 `TIME` it opens (default: now)"},
		&ucli.StringFlag{Name: "closes-at", Usage: "RFC 3339 `TIME` it closes (default: open until tally poll close)"},
		&ucli.StringSliceFlag{Name: "eligible", Usage: "a principal `ID` allowed to answer; repeat for each (default: any principal)"},
		&ucli.BoolFlag{Name: "public-results", Usage: "anyone may see the results without a token: intake's live page /polls/ID " +
			"and its stream /v1/polls/ID/live (default: only the principals that may answer)"},
	}
}

// pollCreate is tally poll create ID. Run again with the same
// definition it changes nothing and succeeds, as POST /v1/polls does.
func pollCreate(c *ucli.Context) error {
	if c.NArg() != 1 {
		return errors.New("give the poll ID, e.g. tally poll create lunch --title 'Lunch?' --choice pizza --choice sushi")
	}
	p, err := pollFromFlags(c)
	if err != nil {
		return err
	}
	return withStore(c, func(store *ledger.Store) error {
		created, err := store.EnsurePoll(c.Context, p)
		var conflict *ledger.DefinitionConflict
		switch {
		case errors.As(err, &conflict):
			return fmt.Errorf("poll %s already exists with another %s (tally poll show %s): choose another ID", p.ID, conflict.Field, p.ID)
		case err != nil:
			return err
		case !created:
			fmt.Fprintf(c.App.ErrWriter, "poll %s exists already, as asked; nothing changed\n", p.ID)
		default:
			fmt.Fprintf(c.App.ErrWriter, "created poll %s with %d choices\n", p.ID, len(p.Choices))
		}
		return nil
	})
}

// pollFromFlags is the poll tally poll create describes.
func pollFromFlags(c *ucli.Context) (ledger.Poll, error) {
	p := ledger.Poll{ID: c.Args().First(), Title: c.String("title"), Choices: c.StringSlice("choice"), Eligible: c.StringSlice("eligible"),
		PublicResults: c.Bool("public-results")}
	var err error
	if p.OpensAt, err = parseTimeFlag(c, "opens-at"); err != nil {
		return ledger.Poll{}, err
	}
	closes, err := parseTimeFlag(c, "closes-at")
	if err != nil {
		return ledger.Poll{}, err
	}
	if !closes.IsZero() {
		p.ClosesAt = &closes
	}
	return p, nil
}

// pollClose is tally poll close ID.
func pollClose(c *ucli.Context) error {
	if c.NArg() != 1 {
		return errors.New("give the poll ID to close")
	}
	at, err := parseTimeFlag(c, "at")
	if err != nil {
		return err
	}
	if at.IsZero() {
		at = time.Now()
	}
	return withStore(c, func(store *ledger.Store) error {
		if err := store.ClosePoll(c.Context, c.Args().First(), at); err != nil {
			if errors.Is(err, ledger.ErrNotFound) {
				return fmt.Errorf("no poll %s (tally poll list shows them)", c.Args().First())
			}
			return err
		}
		fmt.Fprintf(c.App.ErrWriter, "poll %s closes at %s\n", c.Args().First(), at.UTC().Format(time.RFC3339))
		return nil
	})
}

// pollList is tally poll list.
func pollList(c *ucli.Context) error {
	asJSON, err := outputJSON(c)
	if err != nil {
		return err
	}
	return withStore(c, func(store *ledger.Store) error {
		ps, err := store.Polls(c.Context)
		if err != nil {
			return err
		}
		if asJSON {
			out := make([]pollJSON, len(ps))
			for i, p := range ps {
				out[i] = toPollJSON(p, nil)
			}
			return writeJSON(c.App.Writer, out)
		}
		t := newTable(c.App.Writer, "ID", "STATE", "CLOSES", "ELIGIBLE", "CHOICES", "TITLE")
		for _, p := range ps {
			t.row(p.ID, p.State(time.Now()), fmtTimePtr(p.ClosesAt), eligibleText(p), strings.Join(p.Choices, ","), p.Title)
		}
		return t.flush()
	})
}

// pollShow is tally poll show ID: the poll and its tallies.
func pollShow(c *ucli.Context) error {
	asJSON, err := outputJSON(c)
	if err != nil {
		return err
	}
	if c.NArg() != 1 {
		return errors.New("give the poll ID to show")
	}
	return withStore(c, func(store *ledger.Store) error {
		p, err := store.Poll(c.Context, c.Args().First())
		if errors.Is(err, ledger.ErrNotFound) {
			return fmt.Errorf("no poll %s (tally poll list shows them)", c.Args().First())
		}
		if err != nil {
			return err
		}
		res, err := store.Results(c.Context, p.ID)
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(c.App.Writer, toPollJSON(p, &res))
		}
		return printPoll(c.App.Writer, p, res)
	})
}

// printPoll prints a poll and its tallies for a person.
func printPoll(w io.Writer, p ledger.Poll, res ledger.Results) error {
	fmt.Fprintf(w, "poll      %s\ntitle     %s\nstate     %s\nopens     %s\ncloses    %s\neligible  %s\nresults   %s\n\n",
		p.ID, p.Title, p.State(time.Now()), p.OpensAt.UTC().Format(time.RFC3339), fmtTimePtr(p.ClosesAt), eligibleText(p),
		resultsText(p))
	t := newTable(w, "CANDIDATE", "VOTES")
	for _, r := range res.Results {
		t.row(r.CandidateID, strconv.FormatInt(r.Votes, 10))
	}
	t.row("total", strconv.FormatInt(res.Total, 10))
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nas of %s, from the projection (tally rebuild --poll %s verifies it against the ledger)\n",
		res.AsOf.UTC().Format(time.RFC3339), p.ID)
	return nil
}

type pollJSON struct {
	ID          string     `json:"id"`
	Title       string     `json:"title"`
	State       string     `json:"state"`
	OpensAt     time.Time  `json:"opens_at"`
	ClosesAt    *time.Time `json:"closes_at"`
	Eligibility string     `json:"eligibility"`
	Eligible    []string   `json:"eligible,omitempty"`
	Choices     []string   `json:"choices"`
	// PublicResults: anyone may see the results, without a token.
	PublicResults bool            `json:"public_results"`
	Results       *ledger.Results `json:"results,omitempty"`
}

func toPollJSON(p ledger.Poll, res *ledger.Results) pollJSON {
	return pollJSON{ID: p.ID, Title: p.Title, State: p.State(time.Now()), OpensAt: p.OpensAt, ClosesAt: p.ClosesAt,
		Eligibility: p.Eligibility, Eligible: p.Eligible, Choices: p.Choices, PublicResults: p.PublicResults, Results: res}
}

func eligibleText(p ledger.Poll) string {
	if p.Eligibility == ledger.EligibleList {
		return fmt.Sprintf("%d listed", len(p.Eligible))
	}
	return "any"
}

// resultsText says who may see a poll's results.
func resultsText(p ledger.Poll) string {
	if p.PublicResults {
		return "public (intake's page /polls/" + p.ID + " needs no token)"
	}
	return "to whoever may answer"
}

func parseTimeFlag(c *ucli.Context, name string) (time.Time, error) {
	v := c.String(name)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("--%s %q: want an RFC 3339 time such as 2026-12-01T17:00:00Z", name, v)
	}
	return t, nil
}
