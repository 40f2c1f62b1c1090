package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"tally/ledger"
)

// formatFlag is --format, a new one for each command (see commonFlags).
func formatFlag() *ucli.StringFlag {
	return &ucli.StringFlag{Name: "format", Value: "table", Usage: "output format: table or json"}
}

// withStore opens the ledger for one command, runs fn with it and closes it.
func withStore(c *ucli.Context, fn func(*ledger.Store) error) error {
	store, err := openStore(c, ledger.Config{})
	if err != nil {
		return err
	}
	defer store.Pool().Close()
	return fn(store)
}

func outputJSON(c *ucli.Context) (bool, error) {
	switch f := c.String("format"); f {
	case "table":
		return false, nil
	case "json":
		return true, nil
	default:
		return false, fmt.Errorf("--format %q: use table or json", f)
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func rebuildCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "rebuild",
		Usage: "recompute every tally from the ledger and diff it against the projection (exit 1 when they differ)",
		Description: "rebuild counts the ledger rows per (poll, candidate) in one REPEATABLE READ snapshot and sets\n" +
			"them beside poll_results. Exit 0: the projection equals the ledger; 1: a row differs (each one is\n" +
			"named); 2: an error. --apply rewrites the differing rows from the ledger while appends go on, then\n" +
			"verifies again.",
		Flags: commonFlags(
			&ucli.StringFlag{Name: "poll", Usage: "only this poll `ID`"},
			&ucli.BoolFlag{Name: "apply", Usage: "rewrite the projection from the ledger and print what changed"},
			formatFlag(),
		),
		Action: func(c *ucli.Context) error {
			asJSON, err := outputJSON(c)
			if err != nil {
				return err
			}
			return withStore(c, func(store *ledger.Store) error {
				poll := c.String("poll")
				if poll != "" {
					if _, err := store.Poll(c.Context, poll); err != nil {
						return fmt.Errorf("--poll %s: no such poll (tally poll list shows them)", poll)
					}
				}
				var changed []ledger.TallyRow
				if c.Bool("apply") {
					if changed, err = store.Repair(c.Context, poll); err != nil {
						return err
					}
				}
				rep, err := store.Rebuild(c.Context, poll)
				if err != nil {
					return err
				}
				if asJSON {
					out := struct {
						ledger.Report
						Equal    bool              `json:"equal"`
						Repaired []ledger.TallyRow `json:"repaired,omitempty"`
					}{rep, rep.Differing == 0, changed}
					if out.Rows == nil {
						out.Rows = []ledger.TallyRow{}
					}
					if err := writeJSON(c.App.Writer, out); err != nil {
						return err
					}
				} else {
					if c.Bool("apply") {
						printRepaired(c.App.Writer, changed)
					}
					if err := printReport(c.App.Writer, rep); err != nil {
						return err
					}
				}
				if rep.Differing > 0 {
					return checkFailed(fmt.Errorf("%d rows differ", rep.Differing))
				}
				return nil
			})
		},
	}
}

func printRepaired(w io.Writer, changed []ledger.TallyRow) {
	if len(changed) == 0 {
		fmt.Fprintln(w, "repair: nothing to change")
		return
	}
	fmt.Fprintf(w, "repair: rewrote %d rows of poll_results from the ledger\n", len(changed))
	t := newTable(w, "POLL", "CANDIDATE", "WAS", "NOW")
	for _, r := range changed {
		t.row(r.PollID, r.CandidateID, strconv.FormatInt(r.Projection, 10), strconv.FormatInt(r.Ledger, 10))
	}
	t.flush()
	fmt.Fprintln(w)
}

func printReport(w io.Writer, rep ledger.Report) error {
	t := newTable(w, "POLL", "CANDIDATE", "LEDGER", "PROJECTION", "")
	for _, r := range rep.Rows {
		mark := ""
		if r.Differs() {
			mark = fmt.Sprintf("DIFFERS by %+d", r.Projection-r.Ledger)
		}
		t.row(r.PollID, r.CandidateID, strconv.FormatInt(r.Ledger, 10), strconv.FormatInt(r.Projection, 10), mark)
	}
	if err := t.flush(); err != nil {
		return err
	}
	if rep.Differing == 0 {
		_, err := fmt.Fprintf(w, "\nOK: the projection equals the ledger (%d events, %d tallies)\n", rep.LedgerEvents, len(rep.Rows))
		return err
	}
	_, err := fmt.Fprintf(w, "\nMISMATCH: %d of %d tallies differ from the ledger (%d events); tally rebuild --apply rewrites them from the ledger\n",
		rep.Differing, len(rep.Rows), rep.LedgerEvents)
	return err
}

func exportCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "export",
		Usage:     "write the ledger as JSON lines, in ledger order",
		ArgsUsage: "[FILE] (default: standard output)",
		Flags:     commonFlags(&ucli.StringFlag{Name: "poll", Usage: "only this poll `ID`"}),
		Action: func(c *ucli.Context) error {
			return withStore(c, func(store *ledger.Store) error {
				out := c.App.Writer
				if c.NArg() > 0 && c.Args().First() != "-" {
					f, err := os.Create(c.Args().First())
					if err != nil {
						return fmt.Errorf("export: %w", err)
					}
					defer f.Close()
					out = f
				}
				bw := bufio.NewWriterSize(out, 1<<16)
				enc := json.NewEncoder(bw)
				n := 0
				err := store.Export(c.Context, c.String("poll"), func(r ledger.LedgerRow) error {
					n++
					rat, recat := r.ReceivedAt.UTC(), r.RecordedAt.UTC()
					return enc.Encode(ledgerLine{Seq: r.Seq, EventID: r.ClientEventID, PollID: r.PollID,
						CandidateID: r.CandidateID, PrincipalID: r.PrincipalID, ReceivedAt: &rat, RecordedAt: &recat})
				})
				if err != nil {
					return err
				}
				if err := bw.Flush(); err != nil {
					return fmt.Errorf("export: %w", err)
				}
				fmt.Fprintf(c.App.ErrWriter, "exported %d events\n", n)
				return nil
			})
		},
	}
}

func importCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "import",
		Usage:     "append JSON-lines events (the export format) through the ledger's batch path; twice changes nothing",
		ArgsUsage: "FILE (- for standard input)",
		Flags: commonFlags(
			&ucli.IntFlag{Name: "batch-size", EnvVars: []string{"TALLY_IMPORT_BATCH_SIZE"}, Value: 1000, Usage: "events per transaction"},
			&ucli.IntFlag{Name: "workers", EnvVars: []string{"TALLY_IMPORT_WORKERS"}, Value: 2,
				Usage: "transactions in flight at once; events are split among them by principal, so the outcomes are those of one worker"},
			formatFlag(),
		),
		Action: func(c *ucli.Context) error {
			asJSON, err := outputJSON(c)
			if err != nil {
				return err
			}
			if c.NArg() != 1 {
				return errors.New("give the FILE to import (- for standard input); tally export writes the format")
			}
			in := c.App.Reader
			name := c.Args().First()
			if name != "-" {
				f, err := os.Open(name)
				if err != nil {
					return fmt.Errorf("import: %w", err)
				}
				defer f.Close()
				in = f
			}
			return withStore(c, func(store *ledger.Store) error {
				size := c.Int("batch-size")
				if size < 1 || size > store.MaxBatch() {
					return fmt.Errorf("--batch-size %d: use 1 to %d", size, store.MaxBatch())
				}
				workers := c.Int("workers")
				if workers < 1 || workers > 16 {
					return fmt.Errorf("--workers %d: use 1 to 16", workers)
				}
				counts, lines, err := importEvents(c.Context, store, in, size, workers)
				if asJSON {
					if jerr := writeJSON(c.App.Writer, map[string]any{"lines": lines, "outcomes": counts}); jerr != nil {
						return jerr
					}
				} else {
					printCounts(c.App.Writer, counts, lines)
				}
				return err
			})
		},
	}
}

func printCounts(w io.Writer, counts map[string]int, lines int) {
	order := []string{"recorded", "duplicate"}
	for _, r := range []ledger.Reason{ledger.ReasonAlreadyResponded, ledger.ReasonKeyReused, ledger.ReasonPollClosed,
		ledger.ReasonInvalidChoice, ledger.ReasonUnknownPoll, ledger.ReasonNotEligible} {
		order = append(order, ledger.Outcome{Status: ledger.StatusRejected, Reason: r}.String())
	}
	t := newTable(w, "OUTCOME", "EVENTS")
	total := 0
	for _, k := range order {
		t.row(k, strconv.Itoa(counts[k]))
		total += counts[k]
	}
	t.row("total", strconv.Itoa(total))
	t.flush()
}

func pollCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "poll",
		Usage: "create, close, list and show polls",
		Subcommands: []*ucli.Command{
			{
				Name:      "create",
				Usage:     "create a poll with its choices",
				ArgsUsage: "ID",
				Flags: commonFlags(
					&ucli.StringFlag{Name: "title", Required: true, Usage: "the question, for people"},
					&ucli.StringSliceFlag{Name: "choice", Required: true, Usage: "a candidate `ID`; repeat for each"},
					&ucli.StringFlag{Name: "opens-at", Usage: "RFC 3339 `TIME` it opens (default: now)"},
					&ucli.StringFlag{Name: "closes-at", Usage: "RFC 3339 `TIME` it closes (default: open until tally poll close)"},
					&ucli.StringSliceFlag{Name: "eligible", Usage: "a principal `ID` allowed to answer; repeat for each (default: any principal)"},
				),
				Action: func(c *ucli.Context) error {
					if c.NArg() != 1 {
						return errors.New("give the poll ID, e.g. tally poll create lunch --title 'Lunch?' --choice pizza --choice sushi")
					}
					p := ledger.Poll{ID: c.Args().First(), Title: c.String("title"), Choices: c.StringSlice("choice"), Eligible: c.StringSlice("eligible")}
					var err error
					if p.OpensAt, err = parseTimeFlag(c, "opens-at"); err != nil {
						return err
					}
					closes, err := parseTimeFlag(c, "closes-at")
					if err != nil {
						return err
					}
					if !closes.IsZero() {
						p.ClosesAt = &closes
					}
					return withStore(c, func(store *ledger.Store) error {
						if err := store.CreatePoll(c.Context, p); err != nil {
							if errors.Is(err, ledger.ErrExists) {
								return fmt.Errorf("poll %s already exists (tally poll show %s)", p.ID, p.ID)
							}
							return err
						}
						fmt.Fprintf(c.App.ErrWriter, "created poll %s with %d choices\n", p.ID, len(p.Choices))
						return nil
					})
				},
			},
			{
				Name:      "close",
				Usage:     "close a poll: events received from then on are rejected as poll_closed",
				ArgsUsage: "ID",
				Flags:     commonFlags(&ucli.StringFlag{Name: "at", Usage: "RFC 3339 `TIME` to close at (default: now)"}),
				Action: func(c *ucli.Context) error {
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
				},
			},
			{
				Name:  "list",
				Usage: "list the polls",
				Flags: commonFlags(formatFlag()),
				Action: func(c *ucli.Context) error {
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
							t.row(p.ID, pollState(p, time.Now()), fmtTimePtr(p.ClosesAt), eligibleText(p), strings.Join(p.Choices, ","), p.Title)
						}
						return t.flush()
					})
				},
			},
			{
				Name:      "show",
				Usage:     "show a poll and its tallies",
				ArgsUsage: "ID",
				Flags:     commonFlags(formatFlag()),
				Action: func(c *ucli.Context) error {
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
						w := c.App.Writer
						fmt.Fprintf(w, "poll      %s\ntitle     %s\nstate     %s\nopens     %s\ncloses    %s\neligible  %s\n\n",
							p.ID, p.Title, pollState(p, time.Now()), p.OpensAt.UTC().Format(time.RFC3339), fmtTimePtr(p.ClosesAt), eligibleText(p))
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
					})
				},
			},
		},
	}
}

type pollJSON struct {
	ID          string          `json:"id"`
	Title       string          `json:"title"`
	State       string          `json:"state"`
	OpensAt     time.Time       `json:"opens_at"`
	ClosesAt    *time.Time      `json:"closes_at"`
	Eligibility string          `json:"eligibility"`
	Eligible    []string        `json:"eligible,omitempty"`
	Choices     []string        `json:"choices"`
	Results     *ledger.Results `json:"results,omitempty"`
}

func toPollJSON(p ledger.Poll, res *ledger.Results) pollJSON {
	return pollJSON{ID: p.ID, Title: p.Title, State: pollState(p, time.Now()), OpensAt: p.OpensAt, ClosesAt: p.ClosesAt,
		Eligibility: p.Eligibility, Eligible: p.Eligible, Choices: p.Choices, Results: res}
}

func pollState(p ledger.Poll, now time.Time) string {
	switch {
	case now.Before(p.OpensAt):
		return "scheduled"
	case p.OpenAt(now):
		return "open"
	default:
		return "closed"
	}
}

func eligibleText(p ledger.Poll) string {
	if p.Eligibility == ledger.EligibleList {
		return fmt.Sprintf("%d listed", len(p.Eligible))
	}
	return "any"
}

func fmtTimePtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
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
				Action: func(c *ucli.Context) error {
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
				},
			},
			{
				Name:      "revoke",
				Usage:     "revoke a principal's token; its ledger rows stay",
				ArgsUsage: "ID",
				Flags:     commonFlags(),
				Action: func(c *ucli.Context) error {
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
				},
			},
			{
				Name:  "list",
				Usage: "list the principals",
				Flags: commonFlags(formatFlag()),
				Action: func(c *ucli.Context) error {
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
							type pj struct {
								ID        string     `json:"id"`
								Name      string     `json:"name"`
								CreatedAt time.Time  `json:"created_at"`
								RevokedAt *time.Time `json:"revoked_at"`
							}
							out := make([]pj, len(ps))
							for i, p := range ps {
								out[i] = pj(p)
							}
							return writeJSON(c.App.Writer, out)
						}
						t := newTable(c.App.Writer, "ID", "NAME", "CREATED", "REVOKED")
						for _, p := range ps {
							t.row(p.ID, p.Name, p.CreatedAt.UTC().Format(time.RFC3339), fmtTimePtr(p.RevokedAt))
						}
						return t.flush()
					})
				},
			},
		},
	}
}
