package intake

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"tally/ledger"
)

// This file owns the authentication of a request: its bearer token and
// the RFC 6750 challenges (bearerToken, unauthorized), the principal it
// names (principalBy: a signed credential, credentials.go, or a token of
// the stored kind looked up in PostgreSQL), the limits of failed
// authentications and of reads (principal, spendRead; see limits.go).
// The admin routes add the role check (admin_body.go admin).

// principal authenticates a read and spends one of its principal's reads
// (Config.ReadRate), or answers 401, 429 or 503 and returns false.
func (s *Server) principal(w http.ResponseWriter, r *http.Request) (*voter, bool) {
	p, ok := s.principalBy(w, r, time.Time{})
	if !ok {
		return nil, false
	}
	if !s.spendRead(w, p) {
		return nil, false
	}
	return p, true
}

// spendRead spends one of p's reads (Config.ReadRate), which admin
// requests share, or answers 429 and returns false.
func (s *Server) spendRead(w http.ResponseWriter, p *voter) bool {
	wait, ok := s.limits.read(p.ID, time.Now())
	if !ok {
		s.metrics.readLimited.Inc()
		writeProblem(w, http.StatusTooManyRequests, probRateLimited, fmt.Sprintf(
			"your principal may make %g reads per second (event status, results and admin requests) with bursts of %d: "+
				"retry after the Retry-After delay (votes have a limit of their own, untouched by reads)",
			s.cfg.ReadRate, s.cfg.ReadBurst), wait)
	}
	return ok
}

// principalBy authenticates the request, or answers 400, 401, 429 or 503
// and returns false. A signed credential is verified in memory
// (credentials.go). A token of the stored kind ("tly_...") the cache holds
// as valid is served at once; any other is looked up in PostgreSQL,
// bounded by deadline too unless it is zero, within the allowance of
// failed authentications of the client's address (Config.AuthFailureRate,
// limits.go startLookup), which only a refused token spends, so that a
// flood of bad tokens from one address gets 429 before it reaches
// PostgreSQL; concurrent requests with the same uncached token share one
// lookup. Either kind is then refused when the revocations intake holds
// name its principal (or key).
func (s *Server) principalBy(w http.ResponseWriter, r *http.Request, deadline time.Time) (*voter, bool) {
	token, ok := bearerToken(w, r)
	if !ok {
		return nil, false
	}
	if !strings.HasPrefix(token, ledger.LegacyTokenPrefix) {
		return s.signedPrincipal(w, r, token)
	}
	v, ok := s.storedPrincipal(w, r, token, deadline)
	if ok && s.refusedRevoked(w, v.ID, "", time.Time{}, false) {
		return nil, false
	}
	return v, ok
}

// storedPrincipal authenticates token, one of the form issued before
// signed credentials, by its stored hash, as principalBy says.
func (s *Server) storedPrincipal(w http.ResponseWriter, r *http.Request, token string, deadline time.Time) (*voter, bool) {
	if v := s.auth.known(token, time.Now()); v != nil {
		return v, true
	}
	got, _, _ := s.authFlight.Do(token, func() (any, error) {
		return s.attemptAuth(r, token, deadline), nil
	})
	res := got.(authAttempt)
	switch {
	case res.limited:
		s.metrics.authLimited.Inc()
		writeProblem(w, http.StatusTooManyRequests, probAuthRateLimited,
			"too many requests from your address carried a bearer token that is unknown or revoked: "+
				"retry after the Retry-After delay, with a valid token", res.wait)
		return nil, false
	case errors.Is(res.err, errUnauthenticated):
		unauthorized(w, challengeInvalidToken,
			"the bearer token is unknown or revoked: ask an operator for a valid token")
		return nil, false
	case res.err != nil:
		s.failed(r, "authentication failed: PostgreSQL did not answer", res.err)
		writeProblem(w, http.StatusServiceUnavailable, probUnavailable,
			"the token could not be checked because the database did not answer: retry after the Retry-After delay", time.Second)
		return nil, false
	}
	return res.voter, true
}

// authAttempt is the outcome of one attempt to authenticate an uncached
// token.
type authAttempt struct {
	voter   *voter
	limited bool          // the address's budget is spent: nothing was looked up
	wait    time.Duration // when limited, until the next attempt
	err     error
}

// attemptAuth looks token up once the allowance of r's address admits
// it, charging the allowance when the token is refused.
func (s *Server) attemptAuth(r *http.Request, token string, deadline time.Time) (res authAttempt) {
	lookup, wait, err := s.limits.startLookup(r.Context(), r.RemoteAddr, deadline)
	switch {
	case err != nil:
		return authAttempt{err: err}
	case wait > 0:
		return authAttempt{limited: true, wait: wait}
	}
	// Deferred, so that a lookup that panics is not left under way.
	defer func() { lookup.end(errors.Is(res.err, errUnauthenticated)) }()
	v, err := s.auth.authenticate(r.Context(), token, deadline)
	return authAttempt{voter: v, err: err}
}

// The WWW-Authenticate challenges of RFC 6750 3: a bare one when the
// request carried no bearer token, an error code when it carried one that
// is malformed or refused.
const (
	challengeBearer         = "Bearer"
	challengeInvalidRequest = `Bearer error="invalid_request"`
	challengeInvalidToken   = `Bearer error="invalid_token"`
)

// bearerToken returns the token of the request's one Authorization
// header, or answers 400 (more than one header) or 401 and returns false.
func bearerToken(w http.ResponseWriter, r *http.Request) (string, bool) {
	hs := r.Header["Authorization"]
	if len(hs) > 1 {
		w.Header().Set("WWW-Authenticate", challengeInvalidRequest)
		writeProblem(w, http.StatusBadRequest, probAuthorization, fmt.Sprintf(
			"the request has %d Authorization headers: send exactly one, \"Authorization: Bearer TOKEN\"", len(hs)), 0)
		return "", false
	}
	if len(hs) == 0 || hs[0] == "" {
		unauthorized(w, challengeBearer,
			"the request has no Authorization header: send \"Authorization: Bearer TOKEN\" with your principal's token")
		return "", false
	}
	scheme, token, _ := strings.Cut(hs[0], " ")
	token = strings.TrimSpace(token)
	switch {
	case !strings.EqualFold(scheme, "Bearer"):
		unauthorized(w, challengeBearer,
			"the Authorization header is not of the form \"Bearer TOKEN\": send your principal's token that way")
		return "", false
	case token == "":
		unauthorized(w, challengeInvalidRequest,
			"the Authorization header has no token after \"Bearer\": send \"Authorization: Bearer TOKEN\" with your principal's token")
		return "", false
	}
	return token, true
}

// unauthorized answers 401 with challenge as its WWW-Authenticate.
func unauthorized(w http.ResponseWriter, challenge, detail string) {
	writeProblem(challengeWriter{w, challenge}, http.StatusUnauthorized, probUnauthorized, detail, 0)
}

// challengeWriter sets its challenge as the WWW-Authenticate header as the
// status is written, in place of the generic one writeProblem gives every
// 401.
type challengeWriter struct {
	http.ResponseWriter
	challenge string
}

func (c challengeWriter) WriteHeader(code int) {
	c.Header().Set("WWW-Authenticate", c.challenge)
	c.ResponseWriter.WriteHeader(code)
}
