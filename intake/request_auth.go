package intake

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// This file owns the authentication of a request: its bearer token and
// the RFC 6750 challenges (bearerToken, unauthorized), the principal it
// names (principalBy: a signed credential, credentials.go), the limits of failed
// authentications and of reads (principal, spendRead; see limits.go).
// The admin routes add the role check (package admin's admin).

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
// and returns false: its token must be a signed credential, verified in
// memory and checked against the revocations intake holds
// (credentials.go). A token of the form "tly_..." was never taken by a
// release and gets 401 saying to ask for a signed credential. It takes
// the request's deadline, which no step needs: none asks PostgreSQL.
func (s *Server) principalBy(w http.ResponseWriter, r *http.Request, _ time.Time) (*voter, bool) {
	token, ok := bearerToken(w, r)
	if !ok {
		return nil, false
	}
	if strings.HasPrefix(token, storedTokenPrefix) {
		s.metrics.credentials[credInvalid].Inc()
		unauthorized(w, challengeInvalidToken,
			"the bearer token is of the stored kind (tly_...), which intake no longer takes: "+
				"ask an operator to issue your principal a signed credential (tally principal reissue)")
		return nil, false
	}
	return s.signedPrincipal(w, r, token)
}

// storedTokenPrefix starts the tokens of the stored kind, looked up by
// their hash in PostgreSQL, which no release took: such a token is told
// apart so that its 401 says what to do.
const storedTokenPrefix = "tly_"

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
