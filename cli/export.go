package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	ucli "github.com/urfave/cli/v2"

	"tally/audit"
	"tally/ledger"
)

func exportCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "export",
		Usage:     "write the ledger as JSON lines, each poll's rows in the order of its log",
		ArgsUsage: "[FILE] (default: standard output)",
		Flags: commonFlags(&ucli.StringFlag{Name: "poll", Usage: "only this poll `ID`"},
			&ucli.StringFlag{Name: "checkpoints", Usage: "also write the signed checkpoints to `FILE`, JSON lines, for tally audit verify --checkpoints"}),
		Action: runExport,
	}
}

// runExport is tally export: the ledger, or one poll of it, as JSON lines
// on FILE or standard output, and with --checkpoints the signed
// checkpoints beside it; the counts go to standard error.
func runExport(c *ucli.Context) error {
	return withStore(c, func(store *ledger.Store) error {
		// Checkpoints first: each was stored for rows already committed, so
		// the ledger read after them holds every tree they sign.
		if path := c.String("checkpoints"); path != "" {
			if err := exportCheckpoints(c, store, path); err != nil {
				return err
			}
		}
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
		n, err := exportLines(c, store, bw)
		if err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return fmt.Errorf("export: %w", err)
		}
		fmt.Fprintf(c.App.ErrWriter, "exported %d events\n", n)
		return nil
	})
}

// exportLines encodes the ledger rows of --poll (every poll when empty) on
// w, one ledgerLine each, and returns how many it wrote.
func exportLines(c *ucli.Context, store *ledger.Store, w io.Writer) (int, error) {
	enc := json.NewEncoder(w)
	n := 0
	err := store.Export(c.Context, c.String("poll"), func(r ledger.LedgerRow) error {
		n++
		rat, recat := r.ReceivedAt.UTC(), r.RecordedAt.UTC()
		line := ledgerLine{Seq: r.Seq, EventID: r.ClientEventID, PollID: r.PollID,
			CandidateID: r.CandidateID, PrincipalID: r.PrincipalID, ReceivedAt: &rat, RecordedAt: &recat}
		if r.LeafIndex >= 0 {
			line.LeafIndex = &r.LeafIndex
		}
		return enc.Encode(line)
	})
	return n, err
}

// exportCheckpoints writes the stored checkpoints of --poll (every poll
// when empty) to path, as audit.WriteCheckpoint lines.
func exportCheckpoints(c *ucli.Context, store *ledger.Store, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--checkpoints: %w", err)
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<16)
	n := 0
	err = store.Checkpoints(c.Context, c.String("poll"), func(cp ledger.Checkpoint) error {
		n++
		return audit.WriteCheckpoint(bw, cp.Stored())
	})
	if err != nil {
		return fmt.Errorf("export checkpoints: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("--checkpoints: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("--checkpoints: %w", err)
	}
	fmt.Fprintf(c.App.ErrWriter, "exported %d checkpoints\n", n)
	return nil
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
		Action: runImport,
	}
}

// runImport is tally import: it appends the events of FILE (importEvents in
// importer.go) and prints the count of each outcome, also when a bad line
// stopped it.
func runImport(c *ucli.Context) error {
	asJSON, err := outputJSON(c)
	if err != nil {
		return err
	}
	if c.NArg() != 1 {
		return errors.New("give the FILE to import (- for standard input); tally export writes the format")
	}
	in := c.App.Reader
	if name := c.Args().First(); name != "-" {
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
			printCounts(c.App.Writer, counts)
		}
		return err
	})
}

// printCounts prints the events of each outcome, every outcome named even
// when none had it.
func printCounts(w io.Writer, counts map[string]int) {
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
