package cli

import (
	"fmt"
	"io"
	"strconv"

	ucli "github.com/urfave/cli/v2"

	"tally/ledger"
)

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
			quietFlag("REBUILD"),
		),
		Action: runRebuild,
	}
}

// runRebuild is tally rebuild: repair when asked, verify, print, and exit 1
// when a row still differs. ledger.Store.Repair and Rebuild say nothing
// until they return, so the progress line is a spinner with the time so
// far, wiped before the report is printed.
func runRebuild(c *ucli.Context) error {
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
		const repairing, verifying = "rebuild: repairing the projection", "rebuild: recounting the ledger and checking its logs"
		p := startProgress(c, meter{label: verifying, spin: true})
		defer p.stop()
		var changed []ledger.TallyRow
		if c.Bool("apply") {
			p.describe(repairing)
			if changed, err = store.Repair(c.Context, poll); err != nil {
				return err
			}
			p.describe(verifying)
		}
		rep, err := store.Rebuild(c.Context, poll)
		if err != nil {
			return err
		}
		p.stop()
		if asJSON {
			err = writeRebuildJSON(c.App.Writer, rep, changed)
		} else {
			err = printRebuild(c.App.Writer, rep, changed, c.Bool("apply"))
		}
		if err != nil {
			return err
		}
		switch {
		case rep.Differing > 0 && rep.LogProblems > 0:
			return checkFailed(fmt.Errorf("%d rows differ and %d polls' logs do not verify", rep.Differing, rep.LogProblems))
		case rep.Differing > 0:
			return checkFailed(fmt.Errorf("%d rows differ", rep.Differing))
		case rep.LogProblems > 0:
			return checkFailed(fmt.Errorf("%d polls' logs do not verify against their rows", rep.LogProblems))
		}
		return nil
	})
}

// writeRebuildJSON writes the report with whether the projection equals the
// ledger and the rows --apply rewrote.
func writeRebuildJSON(w io.Writer, rep ledger.Report, changed []ledger.TallyRow) error {
	out := struct {
		ledger.Report
		Equal    bool              `json:"equal"`
		Repaired []ledger.TallyRow `json:"repaired,omitempty"`
	}{rep, rep.Differing == 0, changed}
	if out.Rows == nil {
		out.Rows = []ledger.TallyRow{}
	}
	if out.Logs == nil {
		out.Logs = []ledger.LogCheck{}
	}
	return writeJSON(w, out)
}

// printRebuild prints, for a person, what --apply rewrote (when it ran) and
// the report.
func printRebuild(w io.Writer, rep ledger.Report, changed []ledger.TallyRow, applied bool) error {
	if applied {
		printRepaired(w, changed)
	}
	return printReport(w, rep)
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
		fmt.Fprintf(w, "\nOK: the projection equals the ledger (%d events, %d tallies)\n", rep.LedgerEvents, len(rep.Rows))
	} else {
		fmt.Fprintf(w, "\nMISMATCH: %d of %d tallies differ from the ledger (%d events); tally rebuild --apply rewrites them from the ledger\n",
			rep.Differing, len(rep.Rows), rep.LedgerEvents)
	}
	return printLogChecks(w, rep)
}

// printLogChecks prints every log that did not verify, or that all did.
func printLogChecks(w io.Writer, rep ledger.Report) error {
	if rep.LogProblems == 0 {
		_, err := fmt.Fprintf(w, "OK: every poll's log verifies against its rows (%d logs)\n", len(rep.Logs))
		return err
	}
	fmt.Fprintf(w, "\nLOG MISMATCH: %d of %d polls' logs do not verify against their rows.\n"+
		"The ledger or its log was changed outside tally: compare with a signed checkpoint (tally audit verify) to tell which.\n",
		rep.LogProblems, len(rep.Logs))
	t := newTable(w, "POLL", "LEAF", "HEAD SIZE", "ROWS", "DEFINITIONS", "PROBLEM")
	for _, c := range rep.Logs {
		if !c.OK() {
			t.row(c.PollID, strconv.FormatInt(c.Leaf, 10), strconv.FormatInt(c.Size, 10), strconv.FormatInt(c.Rows, 10),
				strconv.FormatInt(c.Definitions, 10), c.Problem)
		}
	}
	return t.flush()
}
