package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

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
			&ucli.StringFlag{Name: "checkpoints", Usage: "also write the signed checkpoints to `FILE`, JSON lines, for tally audit verify --checkpoints"},
			quietFlag("EXPORT")),
		Action: runExport,
	}
}

// runExport is tally export: the ledger, or one poll of it, as JSON lines
// on FILE or standard output, and with --checkpoints the signed
// checkpoints beside it; the counts, and the progress while it runs, go
// to standard error.
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
		p := startExportProgress(c, store, out)
		defer p.stop()
		bw := bufio.NewWriterSize(out, 1<<16)
		n, defs, err := exportLines(c, store, bw, p)
		if err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return fmt.Errorf("export: %w", err)
		}
		p.stop()
		fmt.Fprintf(c.App.ErrWriter, "exported %d events and %d definitions\n", n, defs)
		return nil
	})
}

// startExportProgress starts the progress line of an export to out. It
// stays off while the lines go to a terminal, where it would break them.
//
// The total is known for one poll only: its log head's size, one read by
// primary key, the count of its rows in the log (a row in no leaf, or a
// row appended since, goes past it; the line then counts on without a
// total). Of the whole ledger an exact count(*) would read every row the
// export is about to read, doubling its work; the cheap estimate,
// pg_class.reltuples, is a planner statistic that only VACUUM and ANALYZE
// refresh (-1 before the first), of the whole table, and would put SQL in
// cli, which reaches PostgreSQL only through ledger.Store. So the whole
// ledger shows its count, rate and time so far, with no time left.
func startExportProgress(c *ucli.Context, store *ledger.Store, out io.Writer) *progress {
	if !showProgress(c) || (out == c.App.Writer && isTTY(out)) {
		return &progress{}
	}
	m := meter{label: "export", unit: "lines"}
	if poll := c.String("poll"); poll != "" {
		if h, err := store.Head(c.Context, poll); err == nil {
			m.total = h.Size
		}
	}
	return newProgress(c.Context, c.App.ErrWriter, true, m, progressRefresh)
}

// exportLines writes the ledger rows and definitions of --poll (every
// poll when empty) on w, one audit.AppendExportLine each, counts each on
// p, and returns how many rows and definitions it wrote.
func exportLines(c *ucli.Context, store *ledger.Store, w io.Writer, p *progress) (rows, defs int, err error) {
	var buf []byte
	err = store.Export(c.Context, c.String("poll"), func(r ledger.LedgerRow) error {
		if r.Definition != nil {
			defs++
		} else {
			rows++
		}
		p.add(1)
		buf = audit.AppendExportLine(buf[:0], r.ExportRow())
		_, err := w.Write(buf)
		return err
	})
	return rows, defs, err
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
			quietFlag("IMPORT"),
		),
		Action: runImport,
	}
}

// runImport is tally import: it appends the events of FILE (importEvents in
// importer.go) and prints the count of each outcome, also when a bad line
// stopped it. While it runs, the progress line counts the bytes read, of
// the file's size when FILE (or a redirected standard input) is a
// regular file.
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
		p := startProgress(c, meter{label: "import", total: regularSize(in)})
		defer p.stop()
		counts, lines, err := importEvents(c.Context, store, p.reader(in), size, workers)
		p.stop()
		if asJSON {
			defs := map[string]int{}
			for k, n := range counts {
				if what, ok := strings.CutPrefix(k, "definition: "); ok {
					defs[what] = n
					delete(counts, k)
				}
			}
			if jerr := writeJSON(c.App.Writer, map[string]any{"lines": lines, "outcomes": counts, "definitions": defs}); jerr != nil {
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
		ledger.ReasonInvalidChoice, ledger.ReasonInvalidBallot, ledger.ReasonUnknownPoll, ledger.ReasonNotEligible} {
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
	var defs, differ []string
	for _, k := range []string{"poll created", "poll kept", "poll closed", "unchanged"} {
		if n := counts["definition: "+k]; n > 0 {
			defs = append(defs, fmt.Sprintf("%s %d", k, n))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		if what, ok := strings.CutPrefix(k, "definition: poll kept, "); ok {
			differ = append(differ, fmt.Sprintf("%d %s", counts[k], what))
		}
	}
	if len(defs) > 0 {
		fmt.Fprintf(w, "definitions: %s\n", strings.Join(defs, ", "))
	}
	if len(differ) > 0 {
		fmt.Fprintf(w, "warning: polls kept as they are here, though their question differs from the export's (%s): "+
			"their logs start with another definition, so no root of theirs is the export's; "+
			"to reproduce the roots, import into a database without those polls\n", strings.Join(differ, "; "))
	}
}
