package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	ucli "github.com/urfave/cli/v2"

	"tally/audit"
	"tally/ledger"
)

// logCommand is tally log: the polls' Merkle logs: the signing key, and
// the checkpoints the projector signed with it.
func logCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "log",
		Usage: "the polls' Merkle logs: the signing key, checkpoints and proofs",
		Subcommands: []*ucli.Command{
			{
				Name:  "key",
				Usage: "the log's signing key",
				Subcommands: []*ucli.Command{{
					Name:  "generate",
					Usage: "write a new Ed25519 signer key (mode 0600) and print its verifier key",
					Description: "The signer key stays with the projector (--log-key); the verifier key is published,\n" +
						"for auditors (tally audit verify --key) and voters (tally audit receipt --key). NAME names\n" +
						"the deployment and starts every checkpoint's origin: NAME/polls/POLL. A rotated key gets a\n" +
						"new name; checkpoints signed with the old key still verify with the old verifier key.",
					Flags: []ucli.Flag{
						&ucli.StringFlag{Name: "name", Required: true, Usage: "the log's `NAME`, such as tally.example.org"},
						&ucli.StringFlag{Name: "out", Required: true, Usage: "`FILE` to write the signer key to"},
						&ucli.BoolFlag{Name: "force", Usage: "overwrite FILE if it exists"},
					},
					Action: logKeyGenerate,
				}},
			},
			{
				Name:  "checkpoint",
				Usage: "print a poll's latest signed checkpoint (exit 1 when it has none)",
				Description: "The projector signs checkpoints when it runs with --log-key. The text printed is the\n" +
					"signed note, as GET /v1/polls/{poll_id}/checkpoint answers it and tally audit reads it.",
				Flags:  commonFlags(&ucli.StringFlag{Name: "poll", Required: true, Usage: "the poll's `ID`"}),
				Action: logCheckpoint,
			},
			logProveCommand(),
			logConsistencyCommand(),
		},
	}
}

// logCheckpoint is tally log checkpoint: the latest signed checkpoint of
// --poll on standard output.
func logCheckpoint(c *ucli.Context) error {
	poll := c.String("poll")
	return withStore(c, func(store *ledger.Store) error {
		cp, err := store.LatestCheckpoint(c.Context, poll)
		if errors.Is(err, ledger.ErrNotFound) {
			err = fmt.Errorf("poll %s has no signed checkpoint (or does not exist): run the projector with --log-key FILE (tally log key generate writes one) and it signs each poll's log", poll)
			fmt.Fprintln(c.App.ErrWriter, "tally:", err)
			return checkFailed(err)
		}
		if err != nil {
			return err
		}
		_, err = io.WriteString(c.App.Writer, cp.Note)
		return err
	})
}

// logKeyGenerate is tally log key generate: the signer key to --out, the
// verifier key to standard output.
func logKeyGenerate(c *ucli.Context) error {
	skey, vkey, err := audit.GenerateKey(c.String("name"))
	if err != nil {
		return fmt.Errorf("--name: %w", err)
	}
	if err := writeSecret(c.String("out"), skey+"\n", c.Bool("force"), "a signer key"); err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "signer key written to %s (keep it secret); the verifier key:\n", c.String("out"))
	_, err = fmt.Fprintln(c.App.Writer, vkey)
	return err
}

// writeSecret writes text, what (a signer key, say), to a file only its
// owner may read, refusing to replace an existing file unless force.
func writeSecret(path, text string, force bool, what string) error {
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if force {
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("--out %s exists; %s is not replaced by accident (--force replaces it)", path, what)
	}
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	// An existing file keeps its mode through O_TRUNC: set it.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("--out: %w", err)
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return fmt.Errorf("--out: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	return nil
}
