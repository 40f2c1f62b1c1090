package cli

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"tally/credential"
	"tally/ledger"
	"tally/vote"
)

// credentialCommand is tally credential: the keys that sign principals'
// bearer tokens.
func credentialCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "credential",
		Usage: "the credential keys that sign principals' bearer tokens",
		Subcommands: []*ucli.Command{{
			Name:  "key",
			Usage: "generate and retire credential keys",
			Subcommands: []*ucli.Command{
				{
					Name:  "generate",
					Usage: "write a new credential key (a JSON Web Key, mode 0600) and print its key id",
					Description: "The key is a secret shared by whoever issues tokens (tally principal add --credential-key)\n" +
						"and every intake (tally intake --credential-key, repeatable: several keys verify, one signs).\n" +
						"Rotate: generate a new key, give it to every intake beside the old one, issue with it, reissue\n" +
						"the old tokens (tally principal reissue), then retire the old key (tally credential key retire).",
					Flags: []ucli.Flag{
						&ucli.StringFlag{Name: "out", Required: true, Usage: "`FILE` to write the key to"},
						&ucli.BoolFlag{Name: "force", Usage: "overwrite FILE if it exists"},
					},
					Action: credentialKeyGenerate,
				},
				{
					Name:      "retire",
					Usage:     "refuse every token a key signed, at every intake, within a second",
					ArgsUsage: "KEY_ID",
					Flags:     commonFlags(),
					Action:    credentialKeyRetire,
				},
			},
		}},
	}
}

// credentialKeyGenerate is tally credential key generate: the key to
// --out, its id to standard output.
func credentialKeyGenerate(c *ucli.Context) error {
	k, err := credential.GenerateKey()
	if err != nil {
		return err
	}
	data, err := k.MarshalJSON()
	if err != nil {
		return err
	}
	if err := writeSecret(c.String("out"), string(data)+"\n", c.Bool("force"), "a credential key"); err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "credential key written to %s (keep it secret: it signs tokens); its key id:\n", c.String("out"))
	_, err = fmt.Fprintln(c.App.Writer, k.ID)
	return err
}

// credentialKeyRetire is tally credential key retire KEY_ID.
func credentialKeyRetire(c *ucli.Context) error {
	kid := c.Args().First()
	if c.NArg() != 1 || !vote.ValidID(kid) {
		return errors.New("give the KEY_ID to retire, as tally credential key generate printed it (k- and 16 hex digits)")
	}
	return withStore(c, func(store *ledger.Store) error {
		if err := store.RetireCredentialKey(c.Context, kid); err != nil {
			return err
		}
		fmt.Fprintf(c.App.ErrWriter, "retired credential key %s: every intake refuses the tokens it signed\n", kid)
		return nil
	})
}

// flagCredentialKey is the key principal add and reissue sign with.
var flagCredentialKey = ucli.StringFlag{Name: "credential-key", EnvVars: []string{"TALLY_CREDENTIAL_KEY"},
	Usage: "the credential key `FILE` that signs the tokens (tally credential key generate writes one)"}

// flagExpires is a token's expiry.
var flagExpires = ucli.StringFlag{Name: "expires",
	Usage: "the tokens expire after this duration (720h) or at this time (2027-01-31T00:00:00Z); default: never"}

// signingKey reads --credential-key.
func signingKey(c *ucli.Context) (credential.Key, error) {
	path := c.String(flagCredentialKey.Name)
	if path == "" {
		return credential.Key{}, errors.New("--credential-key FILE is needed to sign tokens (or TALLY_CREDENTIAL_KEY); " +
			"tally credential key generate --out FILE writes one, and every intake takes it with --credential-key")
	}
	return credential.ReadKeyFile(path)
}

// tokenTerms are what the tokens a command issues are made with: the key
// of --credential-key and the expiry of --expires (zero for none).
func tokenTerms(c *ucli.Context) (credential.Key, time.Time, error) {
	key, err := signingKey(c)
	if err != nil {
		return credential.Key{}, time.Time{}, err
	}
	expires, err := expiry(c, time.Now())
	return key, expires, err
}

// expiry is --expires as a time, zero for none.
func expiry(c *ucli.Context, now time.Time) (time.Time, error) {
	t, err := credential.ParseExpiry(c.String(flagExpires.Name), now)
	if err != nil {
		return time.Time{}, fmt.Errorf("--expires: %w", err)
	}
	return t, nil
}

// readNames reads one name a line from path ("-": standard input),
// skipping blank lines; a name is trimmed of surrounding spaces.
func readNames(c *ucli.Context, path string) ([]string, error) {
	f := os.Stdin
	if path != "-" {
		var err error
		if f, err = os.Open(path); err != nil {
			return nil, fmt.Errorf("--from: %w", err)
		}
		defer f.Close()
	}
	var names []string
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		name := strings.TrimSpace(sc.Text())
		if name == "" {
			continue
		}
		if len(name) > 200 {
			return nil, fmt.Errorf("--from %s line %d: a name is at most 200 bytes", path, line)
		}
		names = append(names, name)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--from %s: %w", path, err)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("--from %s holds no names: give one name a line", path)
	}
	if len(names) > ledger.MaxPrincipalsPerAdd {
		return nil, fmt.Errorf("--from %s holds %d names; at most %d go in one run: split the file", path, len(names), ledger.MaxPrincipalsPerAdd)
	}
	return names, nil
}

// principalsCSV is name,principal_id,token for each principal, with a
// header line.
func principalsCSV(ps []ledger.Principal, tokens []string) ([]byte, error) {
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	_ = w.Write([]string{"name", "principal_id", "token"})
	for i, p := range ps {
		_ = w.Write([]string{p.Name, p.ID, tokens[i]})
	}
	w.Flush()
	return buf.Bytes(), w.Error()
}
