package main

import (
	"os"
	"path/filepath"
	"time"

	"tally/credential"
	"tally/ledger"
)

// This file owns who signs the burst's credentials: burstIssuer, and
// ownKeyIssuer, tally's own tokens (burst_oidc.go has the OpenID Connect
// issuer).

// burstIssuer issues the burst's credentials.
type burstIssuer interface {
	// issue returns a token for each principal, naming createdAt as its
	// creation time.
	issue(ps []ledger.Principal, createdAt time.Time) ([]string, error)
	// intakeFlags make intake take the tokens issue returns; shownFlags
	// are how the rows' commands spell them.
	intakeFlags() []string
	shownFlags() []string
	// describe names the tokens in the rows.
	describe() string
	// rows says whether the principals are rows of principals; when not,
	// issue gets principals with only their names (the subjects).
	rows() bool
	// readyCheck is the check of intake's /readyz that must be "ok"
	// before a burst ("" for none).
	readyCheck() string
}

// ownKeyIssuer signs tally's own tokens (HS256) with a credential key
// written to a file intake reads.
type ownKeyIssuer struct {
	key  credential.Key
	file string
}

func newOwnKeyIssuer(dir string) (*ownKeyIssuer, error) {
	k, err := credential.GenerateKey()
	if err != nil {
		return nil, err
	}
	data, err := k.MarshalJSON()
	if err != nil {
		return nil, err
	}
	file := filepath.Join(dir, "burst-credential-key.json")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		return nil, err
	}
	return &ownKeyIssuer{key: k, file: file}, nil
}

func (o *ownKeyIssuer) issue(ps []ledger.Principal, createdAt time.Time) ([]string, error) {
	tokens := make([]string, len(ps))
	for i, p := range ps {
		tok, err := o.key.Issue(p.ID, createdAt, time.Time{})
		if err != nil {
			return nil, err
		}
		tokens[i] = tok
	}
	return tokens, nil
}

func (o *ownKeyIssuer) intakeFlags() []string { return []string{"--credential-key", o.file} }

func (o *ownKeyIssuer) shownFlags() []string { return []string{"--credential-key", "FILE"} }

func (o *ownKeyIssuer) rows() bool { return true }

func (o *ownKeyIssuer) readyCheck() string { return "" }

func (o *ownKeyIssuer) describe() string { return "a signed credential (tally's own, HS256)" }
