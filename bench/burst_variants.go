package main

import (
	"tally/vote"
	"time"
)

// This file owns the ways intake takes the burst (burstVariant): B and
// its variants of credentials, of --ledger-check and of ballot kinds, with
// what each needs of its poll and its principals.

// burstVariant is one way intake takes the burst; B-OIDC is a variant
// whose issuer runs a local OpenID Connect issuer and signs RS256 tokens
// (burst_oidc.go).
type burstVariant struct {
	id   string // the row of accepted/s; id+"C" counted/s ("B": BC)
	db   string // the name of its database and Redis prefix
	what string // the row's wording, after "the burst"
	// age is how old the principals are when the burst starts: their
	// tokens' creation time and their rows' are set back by it.
	age    time.Duration
	issuer burstIssuer
	flags  []string // intake's flags beyond intakeFlags and the issuer's
	// load is the ballots the burst sends (kinds.go); nil is one single
	// choice of each principal, in a poll of vote.Single.
	load *load
	// goClient: the bench's Go client sends the burst, not wrk.
	goClient bool
}

// requests is the burst's count of requests (n, sz.burstVoters) and of
// the principals that send them: one each, or with the load's changes
// fewer, some sending two or three ballots.
func (v burstVariant) principals(n int) int {
	if v.load == nil || !v.load.changes {
		return n
	}
	most := 0
	for i := range n {
		if p, _ := changeOf(i); p >= most {
			most = p + 1
		}
	}
	return most
}

// burstVariants are the intake variants of a run, in the order their
// rounds run: own signs tally's tokens, oidc is B-OIDC's issuer.
func burstVariants(own, oidc burstIssuer) []burstVariant {
	return []burstVariant{
		{id: "B", db: "burst", issuer: own,
			what: "principals created before intake started"},
		{id: "B-go", db: "burstgo", issuer: own, goClient: true,
			what: "principals created before intake started; sent by the bench's Go client (net/http) instead of wrk"},
		{id: "B-LC", db: "burstlc", issuer: own, age: 48 * time.Hour, flags: []string{"--ledger-check"},
			what: "with intake's --ledger-check, principals created two days before (past the idempotency window): each new event id looked up in the ledger"},
		{id: "B-OIDC", db: "burstoidc", issuer: oidc,
			what: "each a subject of its own (principal id derived from iss and sub, no row in principals), intake having fetched the issuer's keys before the burst"},
	}
}

// burstKindVariants are B's burst with the ballots of P-multiple, P-score,
// P-ranked and P-latest (kindLoads), each into a poll of its load's rules.
func burstKindVariants(own burstIssuer) []burstVariant {
	var vs []burstVariant
	for i := range kindLoads {
		l := &kindLoads[i]
		vs = append(vs, burstVariant{id: "B-" + l.name, db: "burst" + l.name, issuer: own, load: l,
			what: "principals created before intake started; ballots " + l.what})
	}
	return vs
}

// probeAnswer is the answer of the probe vote: for a choice the poll
// does not have, in the shape of its kind.
func (v burstVariant) probeAnswer() string {
	switch v.rules().Kind {
	case vote.KindMultiple, vote.KindRanked:
		return `"ballot":["none"]`
	case vote.KindScore:
		return `"ballot":{"none":1}`
	case vote.KindApprove:
		return `"ballot":{"none":"yes"}`
	}
	return `"candidate_id":"none"`
}

// rules are the rules of the variant's poll.
func (v burstVariant) rules() vote.Rules {
	if v.load == nil {
		return vote.Single
	}
	return v.load.rules
}
