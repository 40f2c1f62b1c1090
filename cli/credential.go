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
)

// credentialCommand is tally credential: the keys that sign principals'
// bearer tokens.
func credentialCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "credential",
		Usage: "the credential keys that sign principals' bearer tokens",
		Subcommands: []*ucli.Command{{
			Name:  "key",
			Usage: "generate, list, show and retire credential keys",
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
					Usage:     "refuse every token one of the deployment's keys signed, at every intake, within a second",
					ArgsUsage: "KEY_ID",
					Description: "KEY_ID must be the id of one of the keys of --credential-key (the key files every intake\n" +
						"takes): tally credential key list prints them. A retirement refuses tally's own tokens of that\n" +
						"key only, never an OpenID Connect issuer's token whose kid happens to be the same.",
					Flags:  commonFlags(&flagDeploymentKeys),
					Action: credentialKeyRetire,
				},
				{
					Name:   "list",
					Usage:  "print the id of each key of --credential-key, its file, and whether it is retired",
					Flags:  commonFlags(&flagDeploymentKeys, formatFlag()),
					Action: credentialKeyList,
				},
				{
					Name:      "show",
					Usage:     "print the id of the key in FILE, and whether it is retired",
					ArgsUsage: "FILE",
					Flags:     commonFlags(formatFlag()),
					Action:    credentialKeyShow,
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

// flagDeploymentKeys are the deployment's keys, as every intake takes
// them: the keys list shows and retire may retire.
var flagDeploymentKeys = ucli.StringSliceFlag{Name: "credential-key", EnvVars: []string{"TALLY_CREDENTIAL_KEY"},
	Usage: "the deployment's credential key `FILE`s, as every intake takes them (repeatable, or comma-separated in TALLY_CREDENTIAL_KEY)"}

// deploymentKeys reads --credential-key, the keys of the deployment.
func deploymentKeys(c *ucli.Context, why string) (*credential.KeySet, []string, error) {
	files := c.StringSlice(flagDeploymentKeys.Name)
	if len(files) == 0 {
		return nil, nil, fmt.Errorf("give the deployment's credential key files with --credential-key FILE (or TALLY_CREDENTIAL_KEY), "+
			"as every intake takes them: %s", why)
	}
	keys, err := credential.ReadKeySet(files)
	if err != nil {
		return nil, nil, fmt.Errorf("--credential-key: %w", err)
	}
	return keys, files, nil
}

// credentialKeyRetire is tally credential key retire KEY_ID: the id must
// have a key id's form and be one of the deployment's keys', so that a
// typing error is not reported as a retirement.
func credentialKeyRetire(c *ucli.Context) error {
	kid := c.Args().First()
	switch {
	case c.NArg() != 1:
		return errors.New("give the KEY_ID to retire, as tally credential key list prints it (" + credential.KeyIDRule + ")")
	case !credential.ValidKeyID(kid):
		return fmt.Errorf("%.80q is not a credential key id: a key id is %s, as tally credential key list prints it", kid, credential.KeyIDRule)
	}
	keys, _, err := deploymentKeys(c, "the key retired must be one of them")
	if err != nil {
		return err
	}
	if !keys.Has(kid) {
		return fmt.Errorf("%s is not the id of any key of --credential-key (they are %s): nothing was retired; "+
			"tally credential key list prints the ids", kid, strings.Join(keys.IDs(), ", "))
	}
	return withStore(c, func(store *ledger.Store) error {
		if err := store.RetireCredentialKey(c.Context, kid); err != nil {
			return err
		}
		fmt.Fprintf(c.App.ErrWriter, "retired credential key %s: every intake refuses the tokens it signed within a second\n", kid)
		return nil
	})
}

// keyJSON is a key as tally credential key list and show --format json
// write it: never its secret.
type keyJSON struct {
	ID        string     `json:"id"`
	File      string     `json:"file"`
	State     string     `json:"state"` // active or retired
	RetiredAt *time.Time `json:"retired_at"`
}

// The states of a credential key.
const (
	keyActive  = "active"
	keyRetired = "retired"
)

// credentialKeyList is tally credential key list.
func credentialKeyList(c *ucli.Context) error {
	if c.NArg() != 0 {
		return errors.New("tally credential key list takes no arguments: give the key files with --credential-key FILE")
	}
	if _, err := outputJSON(c); err != nil {
		return err
	}
	files := c.StringSlice(flagDeploymentKeys.Name)
	if _, _, err := deploymentKeys(c, "list prints the id and state of each"); err != nil {
		return err
	}
	return printKeys(c, files)
}

// credentialKeyShow is tally credential key show FILE.
func credentialKeyShow(c *ucli.Context) error {
	if c.NArg() != 1 {
		return errors.New("give the key FILE whose id to print (tally credential key show /etc/tally/credential.key)")
	}
	if _, err := outputJSON(c); err != nil {
		return err
	}
	return printKeys(c, []string{c.Args().First()})
}

// printKeys prints the id, file and state of the key in each of files.
func printKeys(c *ucli.Context, files []string) error {
	out := make([]keyJSON, len(files))
	for i, f := range files {
		k, err := credential.ReadKeyFile(f)
		if err != nil {
			return err
		}
		out[i] = keyJSON{ID: k.ID, File: f, State: keyActive}
	}
	asJSON, _ := outputJSON(c)
	return withStore(c, func(store *ledger.Store) error {
		retired, err := store.RetiredCredentialKeys(c.Context)
		if err != nil {
			return err
		}
		for i := range out {
			if at, ok := retired[out[i].ID]; ok {
				out[i].State, out[i].RetiredAt = keyRetired, &at
			}
		}
		if asJSON {
			return writeJSON(c.App.Writer, out)
		}
		t := newTable(c.App.Writer, "ID", "STATE", "RETIRED", "FILE")
		for _, k := range out {
			t.row(k.ID, k.State, fmtTimePtr(k.RetiredAt), k.File)
		}
		return t.flush()
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
