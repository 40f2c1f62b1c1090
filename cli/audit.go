package cli

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	ucli "github.com/urfave/cli/v2"
	"golang.org/x/mod/sumdb/note"

	"tally/audit"
	"tally/vote"
)

// maxPrinted bounds the discrepancies a table prints (--format json lists
// them all): a log rewritten early fails every later checkpoint.
const maxPrinted = 100

// auditExitCodes is the exit code table of tally audit verify and
// receipt, as docs/audit.md ("Exit codes") gives it.
const auditExitCodes = `Exit codes:
  0  it verifies: every checkpoint is signed by a key given and is a prefix of the export's
     tree, the results given equal the recount, nothing else is found (verify); the receipt's
     leaf is in its signed tree, and the later checkpoint holds that tree (receipt)
  1  the files were read and do not verify: each discrepancy is named (poll, leaves, field,
     line), or the receipt is REFUSED, saying why. A well-formed --key that did not sign the
     checkpoints is this case: each checkpoint it did not sign is a discrepancy, or the
     receipt is refused
  2  the check could not be made: a flag missing or wrong, a file that cannot be read or is not
     in its format, a --key that is neither a verifier key nor a file holding one, a poll named
     (--eligible, --before-definitions) that the export does not hold`

func auditCommand() *ucli.Command {
	keyFlag := &ucli.StringSliceFlag{Name: "key", Required: true,
		Usage: "verifier `KEY` (the key text, or a file holding it); repeat for keys from before a rotation"}
	return &ucli.Command{
		Name:  "audit",
		Usage: "check, offline, an exported ledger against signed checkpoints, or a voter's receipt",
		Subcommands: []*ucli.Command{
			{
				Name:  "verify",
				Usage: "rebuild each poll's tree from an export, check every checkpoint and recount (exit 1 on a discrepancy)",
				Description: "No database and no network: the export (tally export), the checkpoints file and the\n" +
					"verifier key are all it reads.\n\n" + auditExitCodes,
				Flags: []ucli.Flag{
					&ucli.StringFlag{Name: "export", Required: true, Usage: "the ledger as tally export wrote it (`FILE`)"},
					&ucli.StringFlag{Name: "checkpoints", Required: true, Usage: "the stored checkpoints, JSON lines (`FILE`)"},
					keyFlag,
					&ucli.StringFlag{Name: "results", Usage: "published results to compare, JSON objects as GET /v1/polls/{id}/results answers (`FILE`)"},
					&ucli.StringSliceFlag{Name: "eligible", Usage: "`POLL=FILE`: the principal ids a restricted poll takes, one a line; " +
						"checked against the hash its definitions commit, and every vote against it (repeat for each poll)"},
					&ucli.StringSliceFlag{Name: "before-definitions", Usage: "`POLL` created before definitions were logged (migration 00011), " +
						"whose log may begin with votes; any other poll's log must begin with its definition (repeat for each poll)"},
					formatFlag(),
				},
				Action: auditVerify,
			},
			{
				Name:      "receipt",
				Usage:     "check a vote's receipt: its leaf is in the signed tree (exit 1 if not)",
				ArgsUsage: "FILE (the receipt, or the GET /v1/votes/{id} answer that carries it; - for standard input)",
				Description: "With --checkpoint and --consistency, also checks that a later checkpoint still holds\n" +
					"the receipt's tree, so the vote was not removed since.\n\n" + auditExitCodes,
				Flags: []ucli.Flag{
					keyFlag,
					&ucli.StringFlag{Name: "checkpoint", Usage: "a later signed checkpoint of the poll (`FILE`)"},
					&ucli.StringFlag{Name: "consistency", Usage: "the consistency proof from the receipt's tree size to the later checkpoint's (`FILE`)"},
				},
				Action: auditReceipt,
			},
		},
	}
}

// auditVerify is tally audit verify: read the files, audit, print, exit 1
// on a discrepancy.
func auditVerify(c *ucli.Context) error {
	asJSON, err := outputJSON(c)
	if err != nil {
		return err
	}
	verifiers, err := verifierKeys(c.StringSlice("key"))
	if err != nil {
		return err
	}
	var cps []audit.StoredCheckpoint
	if err := readFile("--checkpoints", c.String("checkpoints"), func(r io.Reader) (err error) {
		cps, err = audit.ReadCheckpoints(r)
		return err
	}); err != nil {
		return err
	}
	var results []audit.PublishedResults
	if path := c.String("results"); path != "" {
		if err := readFile("--results", path, func(r io.Reader) (err error) {
			results, err = audit.ReadResults(r)
			return err
		}); err != nil {
			return err
		}
	}
	eligible, err := eligibleLists(c.StringSlice("eligible"))
	if err != nil {
		return err
	}
	var rep audit.Report
	if err := readFile("--export", c.String("export"), func(r io.Reader) (err error) {
		rep, err = audit.Verify(bufio.NewReaderSize(r, 1<<16),
			audit.Inputs{Checkpoints: cps, Verifiers: verifiers, Results: results, Eligible: eligible,
				BeforeDefinitions: c.StringSlice("before-definitions")})
		return err
	}); err != nil {
		return err
	}
	if asJSON {
		err = writeJSON(c.App.Writer, rep)
	} else {
		err = printAudit(c.App.Writer, rep)
	}
	if err != nil {
		return err
	}
	if !rep.OK() {
		return checkFailed(fmt.Errorf("%d discrepancies", len(rep.Discrepancies)))
	}
	return nil
}

// printAudit prints the polls, their recount and what was found.
func printAudit(w io.Writer, rep audit.Report) error {
	t := newTable(w, "POLL", "LEAVES", "ROOT", "CHECKPOINTS VERIFIED", "LARGEST", "UNSIGNED LEAVES", "RESULTS COMPARED")
	for _, p := range rep.Polls {
		t.row(p.PollID, strconv.FormatInt(p.Leaves, 10), p.Root.String(), strconv.Itoa(p.CheckpointsVerified),
			strconv.FormatInt(p.LargestCheckpoint, 10), strconv.FormatInt(p.UnsignedLeaves, 10), strconv.Itoa(p.ResultsCompared))
	}
	t.flush()
	fmt.Fprintln(w)
	t = newTable(w, "POLL", "CANDIDATE", "VOTES")
	for _, p := range rep.Polls {
		for _, tl := range p.Tallies {
			t.row(p.PollID, tl.CandidateID, strconv.FormatInt(tl.Votes, 10))
		}
	}
	t.flush()
	if rep.OK() {
		unsigned := "every leaf is under a signed checkpoint"
		if n := rep.UnsignedLeaves(); n > 0 {
			unsigned = fmt.Sprintf("%d of the %d leaves are past the largest checkpoint of their poll: no checkpoint signs them, "+
				"so only this export vouches for them", n, rep.Rows)
		}
		undefined := ""
		if n := rep.VotesWithoutDefinition(); n > 0 {
			undefined = fmt.Sprintf("; %d votes come before any definition of their poll (a log from before definitions were logged): "+
				"no definition checks their choice or time", n)
		}
		checked := 0
		for _, p := range rep.Polls {
			if p.EligibleChecked {
				checked++
			}
		}
		if checked > 0 {
			undefined += fmt.Sprintf("; the votes of %d restricted polls are each of a principal on the eligible list given, "+
				"which is the list their definitions commit", checked)
		}
		defs := ""
		if rep.Definitions > 0 {
			defs = fmt.Sprintf(" and %d definitions", rep.Definitions)
		}
		_, err := fmt.Fprintf(w, "\nOK: %d events%s in %d polls; all %d checkpoints are signed and are prefixes of the export's trees; %s%s\n",
			rep.Rows-rep.Definitions, defs, len(rep.Polls), rep.Checkpoints, unsigned, undefined)
		return err
	}
	fmt.Fprintln(w)
	for i, d := range rep.Discrepancies {
		if i == maxPrinted {
			fmt.Fprintf(w, "... and %d more (--format json lists them all)\n", len(rep.Discrepancies)-maxPrinted)
			break
		}
		fmt.Fprintln(w, "DISCREPANCY:", d)
	}
	_, err := fmt.Fprintf(w, "\nMISMATCH: %d discrepancies (%d events in %d polls, %d checkpoints)\n",
		len(rep.Discrepancies), rep.Rows, len(rep.Polls), rep.Checkpoints)
	return err
}

// auditReceipt is tally audit receipt: the receipt against its checkpoint
// and, when given, a later checkpoint through a consistency proof.
func auditReceipt(c *ucli.Context) error {
	if c.NArg() != 1 {
		return fmt.Errorf("tally audit receipt takes one FILE, the receipt (- for standard input)")
	}
	later, proofPath := c.String("checkpoint"), c.String("consistency")
	if (later == "") != (proofPath == "") {
		return fmt.Errorf("--checkpoint and --consistency go together: the later checkpoint and the proof that it extends the receipt's")
	}
	verifiers, err := verifierKeys(c.StringSlice("key"))
	if err != nil {
		return err
	}
	r, err := readReceipt(c, c.Args().First())
	if err != nil {
		return err
	}
	_, v, err := audit.OpenPollCheckpoint([]byte(r.Checkpoint), verifiers, r.PollID)
	if err != nil {
		return refused(c, fmt.Errorf("receipt of poll %s leaf %d: %w", r.PollID, r.LeafIndex, err))
	}
	older, err := audit.VerifyReceipt(r, v, v.Name())
	if err != nil {
		return refused(c, err)
	}
	fmt.Fprintf(c.App.Writer, "OK: the vote of %s for %s in poll %s is leaf %d of the tree of size %d signed by %s\n",
		r.PrincipalID, r.CandidateID, r.PollID, r.LeafIndex, older.Size, v.Name())
	if later == "" {
		return nil
	}
	return checkLater(c, older, verifiers, later, proofPath)
}

// checkLater checks that the later checkpoint holds the receipt's tree.
func checkLater(c *ucli.Context, older audit.Checkpoint, verifiers []note.Verifier, later, proofPath string) error {
	msg, err := os.ReadFile(later)
	if err != nil {
		return fmt.Errorf("--checkpoint: %w", err)
	}
	b, err := os.ReadFile(proofPath)
	if err != nil {
		return fmt.Errorf("--consistency: %w", err)
	}
	proof, err := audit.ParseConsistencyProof(b)
	if err != nil {
		return fmt.Errorf("--consistency %s: %w", proofPath, err)
	}
	poll := older.PollID()
	newer, _, err := audit.OpenPollCheckpoint(msg, verifiers, poll)
	if errors.Is(err, audit.ErrOrigin) {
		err = fmt.Errorf("%w: use a later checkpoint of poll %s, the receipt's", err, poll)
	}
	if err != nil {
		return refused(c, fmt.Errorf("--checkpoint %s: %w", later, err))
	}
	if err := proof.Verify(older, newer); err != nil {
		return refused(c, fmt.Errorf("--consistency %s: %w", proofPath, err))
	}
	_, err = fmt.Fprintf(c.App.Writer, "OK: the later checkpoint (size %d) still holds the receipt's tree, and so the vote\n", newer.Size)
	return err
}

// refused prints why a receipt or a later checkpoint did not verify and
// makes the command exit 1.
func refused(c *ucli.Context, err error) error {
	fmt.Fprintln(c.App.Writer, "REFUSED:", err)
	return checkFailed(err)
}

// readReceipt reads a receipt, bare or as the "receipt" of a vote's status.
func readReceipt(c *ucli.Context, path string) (audit.Receipt, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(io.LimitReader(c.App.Reader, 1<<20))
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return audit.Receipt{}, fmt.Errorf("receipt: %w", err)
	}
	name := path
	if path == "-" {
		name = "standard input"
	}
	receipt, status, err := audit.ReceiptOf(b)
	if err != nil {
		return audit.Receipt{}, fmt.Errorf("%s: %w", name, err)
	}
	if receipt == nil || len(bytes.TrimSpace(receipt)) == 0 || string(bytes.TrimSpace(receipt)) == "null" {
		return audit.Receipt{}, fmt.Errorf("%s holds no receipt yet%s: a vote's status carries one once the vote is recorded and a signed checkpoint covers it "+
			"(the projector signs within --checkpoint-interval when it runs with --log-key); ask for the status again in a second", name, statusOf(status))
	}
	b = receipt
	r, err := audit.ParseReceipt(b)
	if err != nil {
		return audit.Receipt{}, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

func statusOf(status string) string {
	if status == "" {
		return ""
	}
	return " (the vote's status is " + status + ")"
}

// eligibleLists reads each --eligible POLL=FILE.
func eligibleLists(flags []string) ([]audit.EligibleList, error) {
	lists := make([]audit.EligibleList, 0, len(flags))
	for _, f := range flags {
		poll, path, ok := strings.Cut(f, "=")
		if !ok || !vote.ValidID(poll) || path == "" {
			return nil, fmt.Errorf("--eligible %q: give POLL=FILE, the poll's id and a file of its principal ids, one a line", f)
		}
		var l audit.EligibleList
		if err := readFile("--eligible", path, func(r io.Reader) (err error) {
			l, err = audit.ReadEligible(poll, r)
			return err
		}); err != nil {
			return nil, err
		}
		lists = append(lists, l)
	}
	return lists, nil
}

// verifierKeys reads each --key: the key text itself, or a file holding
// it.
func verifierKeys(keys []string) ([]note.Verifier, error) {
	var out []note.Verifier
	for _, k := range keys {
		v, err := audit.NewVerifier(k)
		if err == nil {
			out = append(out, v)
			continue
		}
		b, ferr := os.ReadFile(k)
		if ferr != nil {
			return nil, fmt.Errorf("--key %q is neither a verifier key (name+hash+key) nor a file that holds one: %v", k, ferr)
		}
		if v, err = audit.NewVerifier(string(b)); err != nil {
			return nil, fmt.Errorf("--key %s: %w", k, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// readFile opens path for fn; flag names it in the error.
func readFile(flag, path string, fn func(io.Reader) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	}
	defer f.Close()
	if err := fn(f); err != nil {
		return fmt.Errorf("%s %s: %w", flag, path, err)
	}
	return nil
}
