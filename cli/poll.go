package cli

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	ucli "github.com/urfave/cli/v2"

	"tally/ledger"
	"tally/vote"
)

func pollCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "poll",
		Usage: "create, close, list and show polls",
		Subcommands: []*ucli.Command{
			{
				Name:      "create",
				Usage:     "create a poll with its choices, or many from a file (--from)",
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
		&ucli.StringFlag{Name: "title", Usage: "the question, for people (required without --from)"},
		&ucli.StringSliceFlag{Name: "choice", Usage: "a candidate `ID`; repeat for each (required without --from)"},
		&ucli.StringFlag{Name: "from", Usage: "create the polls of `FILE` instead (- for standard input): JSON lines, each the body of " +
			"POST /v1/polls; each line's outcome is printed (created, exists, or refused with why), up to 1,000 polls a transaction"},
		&ucli.StringFlag{Name: "opens-at", Usage: "RFC 3339 `TIME` it opens (default: now)"},
		&ucli.StringFlag{Name: "closes-at", Usage: "RFC 3339 `TIME` it closes (default: open until tally poll close)"},
		&ucli.StringSliceFlag{Name: "eligible", Usage: "a principal `ID` allowed to answer; repeat for each (default: any principal)"},
		&ucli.BoolFlag{Name: "public-results", Usage: "anyone may see the results without a token: intake's live page /polls/ID " +
			"and its stream /v1/polls/ID/live (default: only the principals that may answer)"},
		&ucli.StringFlag{Name: "kind", Value: string(vote.KindSingle), Usage: "the ballot's `KIND`: single (one choice), multiple (a set of choices), " +
			"approve (yes/no/abstain per choice), score (0 to --max-score per choice) or ranked (choices in order of preference)"},
		&ucli.IntFlag{Name: "min-choices", Usage: "multiple: the fewest choices a ballot holds; 0 lets an empty ballot abstain (default: 1)"},
		&ucli.IntFlag{Name: "max-choices", Usage: "multiple: the most choices a ballot holds (default: every choice)"},
		&ucli.IntFlag{Name: "max-score", Usage: "score: the highest score of one choice (required for score)"},
		&ucli.IntFlag{Name: "budget", Usage: "score: the most points one ballot spends in all (default: no budget)"},
		&ucli.StringFlag{Name: "answers", Value: string(vote.AnswersFinal), Usage: "`MODE`: final (the first ballot counts) or latest " +
			"(a new ballot replaces the principal's last one until the poll closes)"},
	}
}

// ruleFlags names the flag of each field of a definition's ballot rules.
var ruleFlags = map[string]string{
	"ballot.kind": "kind", "ballot.min_choices": "min-choices", "ballot.max_choices": "max-choices",
	"ballot.max_score": "max-score", "ballot.budget": "budget", "answers": "answers", "choices": "choice",
}

// rulesFromFlags are the ballot rules tally poll create's flags ask for,
// for a poll of n choices; an error names the flag.
func rulesFromFlags(c *ucli.Context, n int) (vote.Rules, error) {
	spec := vote.Spec{Kind: c.String("kind"), Answers: c.String("answers")}
	for _, f := range []struct {
		name string
		dst  **int
	}{{"min-choices", &spec.MinChoices}, {"max-choices", &spec.MaxChoices}, {"max-score", &spec.MaxScore}, {"budget", &spec.Budget}} {
		if c.IsSet(f.name) {
			v := c.Int(f.name)
			*f.dst = &v
		}
	}
	r, err := vote.NewRules(spec, n)
	var re *vote.RuleError
	if errors.As(err, &re) {
		return vote.Rules{}, fmt.Errorf("--%s: %s", ruleFlags[re.Field], re.Reason)
	}
	return r, err
}

// pollCreate is tally poll create ID. Run again with the same
// definition it changes nothing and succeeds, as POST /v1/polls does.
func pollCreate(c *ucli.Context) error {
	if c.IsSet("from") {
		return pollCreateFrom(c)
	}
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
	if c.String("title") == "" || len(c.StringSlice("choice")) == 0 {
		return ledger.Poll{}, errors.New("give the poll's --title and a --choice for each of its choices (or --from FILE for many polls)")
	}
	p := ledger.Poll{ID: c.Args().First(), Title: c.String("title"), Choices: c.StringSlice("choice"), Eligible: c.StringSlice("eligible"),
		PublicResults: c.Bool("public-results")}
	if !utf8.ValidString(p.Title) {
		return ledger.Poll{}, fmt.Errorf("--title %q is not UTF-8 (or holds a surrogate's bytes): the title is part of the poll's definition, "+
			"which every reader must read alike; give it in UTF-8", p.Title)
	}
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
	if p.Rules, err = rulesFromFlags(c, len(p.Choices)); err != nil {
		return ledger.Poll{}, err
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
	fmt.Fprintf(w, "poll      %s\ntitle     %s\nstate     %s\nopens     %s\ncloses    %s\neligible  %s\nballot    %s\nresults   %s\n\n",
		p.ID, p.Title, p.State(time.Now()), p.OpensAt.UTC().Format(time.RFC3339), fmtTimePtr(p.ClosesAt), eligibleText(p),
		p.BallotRules(), resultsText(p))
	if err := printResults(w, res); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nas of %s, from the projection (tally rebuild --poll %s verifies it against the ledger)\n",
		res.AsOf.UTC().Format(time.RFC3339), p.ID)
	return nil
}

// printResults prints a poll's tallies as a table, with the columns of
// its kind, and for ranked the Condorcet winner.
func printResults(w io.Writer, res ledger.Results) error {
	cols := []string{"CANDIDATE", "VOTES"}
	switch res.Kind {
	case vote.KindApprove:
		cols = append(cols, "YES", "NO", "ABSTAIN")
	case vote.KindScore:
		cols = append(cols, "SCORE", "MEAN")
	case vote.KindRanked:
		cols = []string{"CANDIDATE", "FIRST", "BORDA"}
	}
	t := newTable(w, cols...)
	itoa := func(p *int64) string {
		if p == nil {
			return "0"
		}
		return strconv.FormatInt(*p, 10)
	}
	for _, r := range res.Results {
		row := []string{r.CandidateID, strconv.FormatInt(r.Votes, 10)}
		switch res.Kind {
		case vote.KindApprove:
			row = append(row, itoa(r.Yes), itoa(r.No), itoa(r.Abstain))
		case vote.KindScore:
			mean := "-"
			if r.Votes > 0 && r.Score != nil {
				mean = strconv.FormatFloat(float64(*r.Score)/float64(r.Votes), 'f', 2, 64)
			}
			row = append(row, itoa(r.Score), mean)
		case vote.KindRanked:
			row = append(row, itoa(r.Borda))
		}
		t.row(row...)
	}
	if res.Kind == vote.KindSingle {
		t.row("total", strconv.FormatInt(res.Total, 10))
	} else {
		t.row("ballots", strconv.FormatInt(res.Ballots, 10))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if res.Kind == vote.KindRanked {
		winner := "none (no choice beats every other)"
		if res.CondorcetWinner.ID != "" {
			winner = res.CondorcetWinner.ID
		}
		fmt.Fprintf(w, "\nCondorcet winner: %s\n", winner)
	}
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
	Ballot        vote.Spec       `json:"ballot"`
	Answers       vote.Answers    `json:"answers"`
	Results       *ledger.Results `json:"results,omitempty"`
}

func toPollJSON(p ledger.Poll, res *ledger.Results) pollJSON {
	return pollJSON{ID: p.ID, Title: p.Title, State: p.State(time.Now()), OpensAt: p.OpensAt, ClosesAt: p.ClosesAt,
		Eligibility: p.Eligibility, Eligible: p.Eligible, Choices: p.Choices, PublicResults: p.PublicResults,
		Ballot: p.BallotRules().Spec(), Answers: p.BallotRules().Answers, Results: res}
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
	if t.Before(time.Unix(0, 0)) { // the audit reads no time before 1970 (docs/audit.md, "Times")
		return time.Time{}, fmt.Errorf("--%s %q is before 1970-01-01T00:00:00Z, which the audit of the poll's log refuses: give a later time", name, v)
	}
	return t, nil
}
