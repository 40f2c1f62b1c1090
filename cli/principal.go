package cli

import (
	"errors"
	"fmt"
	"time"

	ucli "github.com/urfave/cli/v2"

	"tally/credential"
	"tally/ledger"
)

func principalCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "principal",
		Usage: "add, revoke and list principals (the authenticated identities that vote)",
		Subcommands: []*ucli.Command{
			{
				Name:      "add",
				Usage:     "add a principal and print its bearer token alone on stdout, once; or many, --from a file, as CSV",
				ArgsUsage: "NAME",
				Description: "The token is signed with --credential-key and names the principal's id and creation time\n" +
					"(and its expiry, with --expires); intake verifies it with no database. No token is stored: a\n" +
					"token lost is replaced with tally principal reissue, a principal revoked with tally principal revoke.\n" +
					"--from FILE (one name a line, - for standard input) adds them all in one transaction and writes\n" +
					"name,principal_id,token as CSV, with that header line, to stdout or to --out FILE (mode 0600).",
				Flags: commonFlags(&flagCredentialKey, &flagExpires,
					&ucli.StringFlag{Name: "role", Value: ledger.RoleVoter, Usage: "`ROLE` of the principals: voter, or admin " +
						"(may also create and close polls, add and revoke principals through intake's admin routes)"},
					&ucli.StringFlag{Name: "from", Usage: "add a principal for each name in `FILE`, one a line (- for standard input)"},
					&ucli.StringFlag{Name: "out", Usage: "with --from, write the CSV to `FILE` (mode 0600, not replaced) instead of stdout"}),
				Action: principalAdd,
			},
			{
				Name:  "reissue",
				Usage: "print a new signed token for a principal, replacing a lost one: every token it was issued before stops working",
				Description: "The new token is signed with --credential-key. Every earlier token of the principal, signed or of\n" +
					"the form before signed credentials, is refused by every intake within a second of the reissue.",
				ArgsUsage: "ID",
				Flags:     commonFlags(&flagCredentialKey, &flagExpires),
				Action:    principalReissue,
			},
			{
				Name:  "id",
				Usage: "print the principal id of an OpenID Connect subject, for eligibility lists",
				Description: "The id is o- and 40 characters of SHA-256(\"tally oidc principal\\n\" || issuer || \"\\n\" || subject)\n" +
					"in base64url: no e-mail or name reaches the ledger. --issuer is spelled as the tokens' iss claim.",
				Flags: []ucli.Flag{
					&ucli.StringFlag{Name: "issuer", Required: true, Usage: "the issuer `URL`, as its tokens' iss claim spells it"},
					&ucli.StringFlag{Name: "subject", Required: true, Usage: "the subject (`SUB` claim)"},
				},
				Action: principalID,
			},
			{
				Name:      "revoke",
				Usage:     "revoke a principal's token; its ledger rows stay",
				ArgsUsage: "ID",
				Flags: commonFlags(&ucli.BoolFlag{Name: "minted",
					Usage: "also revoke every principal the admin ID added through intake's admin routes, those they added, and so on"}),
				Action: principalRevoke,
			},
			{
				Name:   "list",
				Usage:  "list the principals",
				Flags:  commonFlags(formatFlag()),
				Action: principalList,
			},
		},
	}
}

// principalAdd is tally principal add NAME, or --from FILE. A single
// token goes alone to standard output, so a script can capture it; the
// rest to standard error.
func principalAdd(c *ucli.Context) error {
	from := c.String("from")
	var names []string
	switch {
	case from == "" && c.NArg() != 1:
		return errors.New("give the principal's NAME (tally principal add ci-bot), or --from FILE with one name a line")
	case from != "" && c.NArg() != 0:
		return errors.New("give either a NAME or --from FILE, not both")
	case from == "" && c.String("out") != "":
		return errors.New("--out goes with --from; a single token is printed on stdout")
	case from == "":
		names = []string{c.Args().First()}
	}
	role := c.String("role")
	if role != ledger.RoleVoter && role != ledger.RoleAdmin {
		return fmt.Errorf("--role %q: give voter or admin", role)
	}
	key, expires, err := tokenTerms(c)
	if err != nil {
		return err
	}
	if from != "" {
		if names, err = readNames(c, from); err != nil {
			return err
		}
	}
	return withStore(c, func(store *ledger.Store) error {
		ps, err := store.AddPrincipals(c.Context, names, role)
		if err != nil {
			return err
		}
		tokens := make([]string, len(ps))
		for i, p := range ps {
			if tokens[i], err = key.IssueRole(p.ID, p.Role, p.CreatedAt, expires); err != nil {
				return err
			}
		}
		if from == "" {
			fmt.Fprintln(c.App.Writer, tokens[0])
			fmt.Fprintf(c.App.ErrWriter, "added principal %s (%s, %s); its token is on stdout and is not shown again\n", ps[0].ID, ps[0].Name, role)
			return nil
		}
		out, err := principalsCSV(ps, tokens)
		if err != nil {
			return err
		}
		if path := c.String("out"); path != "" {
			if err := writeSecret(path, string(out), false, "a file of tokens"); err != nil {
				return err
			}
			fmt.Fprintf(c.App.ErrWriter, "added %d principals; their tokens are in %s (mode 0600)\n", len(ps), path)
			return nil
		}
		_, err = c.App.Writer.Write(out)
		fmt.Fprintf(c.App.ErrWriter, "added %d principals; their tokens are on stdout and are not shown again\n", len(ps))
		return err
	})
}

// principalReissue is tally principal reissue ID.
func principalReissue(c *ucli.Context) error {
	if c.NArg() != 1 {
		return errors.New("give the principal ID to reissue a token for (tally principal list shows them)")
	}
	key, expires, err := tokenTerms(c)
	if err != nil {
		return err
	}
	return withStore(c, func(store *ledger.Store) error {
		p, validAfter, err := store.ReissuePrincipal(c.Context, c.Args().First())
		if errors.Is(err, ledger.ErrNotFound) {
			return fmt.Errorf("no principal %s (tally principal list shows them)", c.Args().First())
		}
		if err != nil {
			return err
		}
		token, err := key.IssueRoleAt(p.ID, p.Role, p.CreatedAt, validAfter, expires)
		if err != nil {
			return err
		}
		fmt.Fprintln(c.App.Writer, token)
		fmt.Fprintf(c.App.ErrWriter, "reissued a token for principal %s (%s); it is on stdout and is not shown again. "+
			"Its earlier tokens stop working at every intake within a second\n", p.ID, p.Name)
		return nil
	})
}

// principalID is tally principal id --issuer URL --subject SUB.
func principalID(c *ucli.Context) error {
	_, err := fmt.Fprintln(c.App.Writer, credential.PrincipalIDFor(c.String("issuer"), c.String("subject")))
	return err
}

// principalRevoke is tally principal revoke ID.
func principalRevoke(c *ucli.Context) error {
	if c.NArg() != 1 {
		return errors.New("give the principal ID to revoke (tally principal list shows them)")
	}
	return withStore(c, func(store *ledger.Store) error {
		id := c.Args().First()
		if err := store.RevokePrincipal(c.Context, id); err != nil {
			if errors.Is(err, ledger.ErrNotFound) {
				return fmt.Errorf("no principal %s (tally principal list shows them)", id)
			}
			return err
		}
		fmt.Fprintf(c.App.ErrWriter, "revoked principal %s\n", id)
		if !c.Bool("minted") {
			return nil
		}
		n, err := store.RevokeMinted(c.Context, id)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.App.ErrWriter, "revoked %d principals %s minted, directly or through admins it minted\n", n, id)
		return nil
	})
}

// principalJSON is a principal as tally principal list --format json
// writes it.
type principalJSON struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at"`
	// Role is null for an OpenID Connect subject: its issuer's tokens say
	// its role, token by token.
	Role *string `json:"role"`
	// CreatedBy is the admin that added it over HTTP; null when an
	// operator did.
	CreatedBy *string `json:"created_by"`
}

// principalList is tally principal list.
func principalList(c *ucli.Context) error {
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
			out := make([]principalJSON, len(ps))
			for i, p := range ps {
				out[i] = principalJSON{ID: p.ID, Name: p.Name, CreatedAt: p.CreatedAt, RevokedAt: p.RevokedAt}
				if p.Role != "" {
					out[i].Role = &p.Role
				}
				if p.CreatedBy != "" {
					out[i].CreatedBy = &p.CreatedBy
				}
			}
			return writeJSON(c.App.Writer, out)
		}
		t := newTable(c.App.Writer, "ID", "NAME", "ROLE", "CREATED", "REVOKED")
		for _, p := range ps {
			role := p.Role
			if role == "" {
				role = "(issuer's)" // an OpenID Connect subject's tokens say its role
			}
			t.row(p.ID, p.Name, role, p.CreatedAt.UTC().Format(time.RFC3339), fmtTimePtr(p.RevokedAt))
		}
		return t.flush()
	})
}
