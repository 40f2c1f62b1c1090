package intake

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"tally/credential"
	"tally/ledger"
)

// This file owns the authentication of a signed credential: a token that
// verifies itself (package credential), checked against the revocations
// held in memory. Neither step asks PostgreSQL, so a burst of voters new
// to intake, or a PostgreSQL outage, costs no query and stops no valid
// voter, and no revoked one gets through.

// The results of a signed credential's check; they are the label of its
// counter.
const (
	credValid       = "valid"
	credInvalid     = "invalid"
	credRevoked     = "revoked"
	credUnavailable = "unavailable"
)

// credentialResults are the label values of the credentials counter.
var credentialResults = []string{credValid, credInvalid, credRevoked, credUnavailable}

// signedPrincipal authenticates token as a signed credential, or answers
// 401 (invalid, expired, revoked), 429 (the address's allowance of failed
// authentications is spent) or 503 (not yet able to tell) and returns
// false. The allowance is checked before the token's signature is, so
// that past it a flood of forged tokens costs no signature check; while
// it is spent, a valid token from that address waits as well, since it
// cannot be told from a forged one without one.
func (s *Server) signedPrincipal(w http.ResponseWriter, r *http.Request, token string) (*voter, bool) {
	if s.cfg.Credentials == nil {
		s.metrics.credentials[credInvalid].Inc()
		unauthorized(w, challengeInvalidToken,
			"the bearer token is not one this intake takes (it has no credential keys): ask an operator for a valid token")
		return nil, false
	}
	if wait := s.limits.spent(r.RemoteAddr); wait > 0 {
		s.authLimited(w, wait)
		return nil, false
	}
	id, err := s.cfg.Credentials.Verify(r.Context(), token)
	switch {
	case errors.Is(err, credential.ErrUnavailable):
		s.metrics.credentials[credUnavailable].Inc()
		s.failed(r, "credential not checked", err)
		writeProblem(w, http.StatusServiceUnavailable, probUnavailable,
			"the token's issuer has not given intake its keys yet: retry after the Retry-After delay", time.Second)
		return nil, false
	case err != nil:
		s.metrics.credentials[credInvalid].Inc()
		if wait := s.limits.refused(r.RemoteAddr); wait > 0 {
			s.authLimited(w, wait)
			return nil, false
		}
		s.log.LogAttrs(r.Context(), slog.LevelDebug, "credential refused", slog.String("reason", err.Error()))
		if kid, ok := foreignKey(token, s.cfg.CredentialKeyIDs); ok {
			unauthorized(w, challengeInvalidToken, fmt.Sprintf(
				"the bearer token was signed by credential key %s, which this intake does not hold (it holds %s): "+
					"the token was issued with another key; ask for a token issued with one of this intake's keys "+
					"(tally principal reissue, with the key intake runs with), or give intake that key too",
				quoteClip(kid), strings.Join(s.cfg.CredentialKeyIDs, ", ")))
			return nil, false
		}
		unauthorized(w, challengeInvalidToken,
			"the bearer token is invalid or expired: ask an operator for a valid token")
		return nil, false
	}
	// Retirements are of tally's own keys: an OpenID Connect issuer's key
	// of the same id is not one of them.
	ownKey := ""
	if id.Issuer == credential.Issuer {
		ownKey = id.KeyID
	}
	if s.refusedRevoked(w, id.PrincipalID, ownKey, id.IssuedAt) {
		return nil, false
	}
	s.metrics.credentials[credValid].Inc()
	return s.voters.get(ledger.Principal{ID: id.PrincipalID, CreatedAt: id.CreatedAt, Role: id.Role}, id.ExpiresAt), true
}

// authLimited answers 429: the allowance of failed authentications of
// the client's address is spent for wait.
func (s *Server) authLimited(w http.ResponseWriter, wait time.Duration) {
	s.metrics.authLimited.Inc()
	writeProblem(w, http.StatusTooManyRequests, probAuthRateLimited,
		"too many requests from your address carried a bearer token that is invalid or revoked: "+
			"retry after the Retry-After delay, with a valid token", wait)
}

// refusedRevoked answers 401 when the principal principalID is revoked,
// the key keyID of tally's own retired ("" for a token that names none),
// or the token, issued at issuedAt (zero when it does not say), replaced
// by a reissue; 503 when the revocations were never loaded; and reports
// whether it answered.
func (s *Server) refusedRevoked(w http.ResponseWriter, principalID, keyID string, issuedAt time.Time) bool {
	refused, loaded := s.revoked.refuses(principalID, keyID, issuedAt)
	switch {
	case !loaded:
		s.metrics.credentials[credUnavailable].Inc()
		writeProblem(w, http.StatusServiceUnavailable, probUnavailable,
			"intake has not read the revoked credentials from the database yet, so it cannot accept the token: retry after the Retry-After delay", time.Second)
		return true
	case refused:
		s.metrics.credentials[credRevoked].Inc()
		unauthorized(w, challengeInvalidToken,
			"the bearer token's principal was revoked, the key that signed it retired, or a newer token reissued in its place: "+
				"use the newest token, or ask an operator for a new one")
		return true
	}
	return false
}

// maxForeignKeyToken bounds the token foreignKey reads, as the verifier
// bounds those it checks.
const maxForeignKeyToken = 16 << 10

// foreignKey reads a refused token's header and claims, unverified, and
// returns the key id ("kid") of a token of tally's own (issuer
// credential.Issuer) that names a key none of held: the token is not
// forged or expired so much as issued with a key this intake was not
// given. It reports false for anything else, and when held is empty.
func foreignKey(token string, held []string) (string, bool) {
	if len(held) == 0 || len(token) > maxForeignKeyToken {
		return "", false
	}
	header, rest, ok := strings.Cut(token, ".")
	payload, _, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 {
		return "", false
	}
	var h struct {
		Kid string `json:"kid"`
	}
	var c struct {
		Iss string `json:"iss"`
	}
	if !decodeSegment(header, &h) || !decodeSegment(payload, &c) {
		return "", false
	}
	if c.Iss != credential.Issuer || h.Kid == "" || slices.Contains(held, h.Kid) {
		return "", false
	}
	return h.Kid, true
}

// decodeSegment decodes one base64url segment of a JWT as JSON into v.
func decodeSegment(seg string, v any) bool {
	raw, err := base64.RawURLEncoding.DecodeString(seg)
	return err == nil && json.NewDecoder(bytes.NewReader(raw)).Decode(v) == nil
}
