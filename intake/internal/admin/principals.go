package admin

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"tally/credential"
	"tally/intake/internal/problem"
	"tally/ledger"
	"tally/vote"
)

// This file owns the admin routes of principals: add them in bulk, each
// with its credential shown in that answer only, and revoke one. Adding
// goes through the ledger's AddPrincipals and credential's IssueRole, as
// tally principal add does; revoking through RevokePrincipal, as tally
// principal revoke does, so every intake refuses the principal as soon as
// the revocation's NOTIFY reaches it, and, asked to, what that admin
// minted (RevokeMinted, as tally principal revoke --minted does).

// Route templates of the principal routes, also the route labels of the
// metrics.
const (
	RoutePrincipals      = "/v1/principals"
	RoutePrincipalRevoke = "/v1/principals/{principal_id}/revoke"
)

// principalsRequest is the body of POST /v1/principals.
type principalsRequest struct {
	Names   []string `json:"names"`
	Role    string   `json:"role"`
	Expires string   `json:"expires"`
}

const principalsShape = `{"names": [1 to 10000 names], and optionally "role": "voter" or "admin", ` +
	`"expires": a duration such as "720h" or an RFC 3339 time}`

// issuedPrincipal is one principal added, with its credential.
type issuedPrincipal struct {
	PrincipalID string    `json:"principal_id"`
	Name        string    `json:"name"`
	Role        string    `json:"role"`
	CreatedAt   time.Time `json:"created_at"`
	Token       string    `json:"token"`
}

// principalsAnswer is the answer of POST /v1/principals.
type principalsAnswer struct {
	Principals []issuedPrincipal `json:"principals"`
	ExpiresAt  *time.Time        `json:"expires_at"`
}

// AddPrincipals takes POST /v1/principals: 201 with each principal
// added and its credential, which no later answer shows again. Nothing is
// stored when this intake has no key to sign the credentials with. Admins
// are added only with Config.AddAdminsOverHTTP (403 otherwise), and their
// tokens expire no later than the token of the admin that asked. Under
// an Idempotency-Key header it is idempotent (ledger.AddPrincipalsOnce):
// the same request again answers 201 with the same principals, their
// credentials signed anew; another request under the same key 409.
func (a *Admin) AddPrincipals(w http.ResponseWriter, r *http.Request) {
	admin, ok := a.admin(w, r)
	if !ok {
		return
	}
	var q principalsRequest
	if !readAdminBody(w, r, &q, principalsShape, false) {
		return
	}
	if a.cfg.TokenKey == nil {
		problem.Write(w, http.StatusNotImplemented, probNotConfigured,
			"this intake has no credential key to sign tokens with (tally intake takes one as its credential key): "+
				"nothing was added; ask an operator, or add principals with tally principal add", 0)
		return
	}
	expires, err := credential.ParseExpiry(q.Expires, time.Now())
	if err != nil {
		a.writeFailed(w, r, &ledger.FieldError{Field: "expires", Reason: err.Error()})
		return
	}
	if q.Role == ledger.RoleAdmin {
		if !a.cfg.AddAdminsOverHTTP {
			problem.Write(w, http.StatusForbidden, probForbidden,
				"this intake adds voters only: an operator adds admins with tally principal add, as admins "+
					"(or lets intake add admins over HTTP); nothing was added", 0)
			return
		}
		expires = notAfter(expires, admin.ExpiresAt)
	}
	if n := len(q.Names); n == 0 || n > MaxPrincipalsPerRequest {
		a.writeFailed(w, r, &ledger.FieldError{Field: "names",
			Reason: fmt.Sprintf("%d names; one request adds 1 to %d (split more)", n, MaxPrincipalsPerRequest)})
		return
	}
	idemKey, ok := idempotencyKey(w, r)
	if !ok {
		return
	}
	ps, replayed, err := a.addPrincipals(r, admin, idemKey, q)
	if errors.Is(err, ledger.ErrKeyReused) {
		problem.Write(w, http.StatusConflict, probIdempotencyKeyReused,
			"you used this Idempotency-Key for a request with other names or another role; nothing was added: "+
				"send that request's names and role again to get its principals, or choose a new key for a new request", 0)
		return
	}
	if err != nil {
		a.writeFailed(w, r, err)
		return
	}
	if !replayed {
		a.logWrite(r, admin, "principal.add", fmt.Sprintf("%d principals of role %s", len(ps), ps[0].Role))
	}
	out, err := a.issuePrincipals(ps, expires)
	if err != nil {
		a.writeFailed(w, r, err)
		return
	}
	problem.JSON(w, http.StatusCreated, out)
}

// idempotencyKey gives the request's Idempotency-Key, "" when it has
// none, or answers 400 for a header that is not one key of the form.
func idempotencyKey(w http.ResponseWriter, r *http.Request) (string, bool) {
	key, keyed := r.Header[idempotencyKeyHeader]
	if !keyed {
		return "", true
	}
	if len(key) != 1 || !validIdempotencyKey(key[0]) {
		problem.Write(w, http.StatusBadRequest, problem.BadRequest,
			"the Idempotency-Key header must be given once, 1 to 255 visible ASCII characters (no spaces): a key of your choosing for this request", 0)
		return "", false
	}
	return key[0], true
}

// addPrincipals stores the request's principals as admin, once per
// Idempotency-Key when key is not empty (replayed then says the key's
// first request made them).
func (a *Admin) addPrincipals(r *http.Request, admin Principal, key string, q principalsRequest) (ps []ledger.Principal, replayed bool, err error) {
	err = a.ask(r, func() error {
		var err error
		ctx := ledger.ActingAs(r.Context(), admin.ID)
		if key != "" {
			ps, replayed, err = a.store.AddPrincipalsOnce(ctx, key, q.Names, q.Role)
		} else {
			ps, err = a.store.AddPrincipals(ctx, q.Names, q.Role)
		}
		return err
	})
	return ps, replayed, err
}

// issuePrincipals signs a token for each principal, expiring at expires
// (never when zero).
func (a *Admin) issuePrincipals(ps []ledger.Principal, expires time.Time) (principalsAnswer, error) {
	out := principalsAnswer{Principals: make([]issuedPrincipal, len(ps))}
	if !expires.IsZero() {
		out.ExpiresAt = &expires
	}
	for i, p := range ps {
		token, err := a.cfg.TokenKey.IssueRole(p.ID, p.Role, p.CreatedAt, expires)
		if err != nil {
			return out, err
		}
		out.Principals[i] = issuedPrincipal{PrincipalID: p.ID, Name: p.Name, Role: p.Role, CreatedAt: p.CreatedAt, Token: token}
	}
	return out, nil
}

// notAfter is the expiry expires (zero: none) brought back to limit when
// limit is set and expires is later, or none: an admin's tokens expire
// no later than those of the admin that added it.
func notAfter(expires, limit time.Time) time.Time {
	if !limit.IsZero() && (expires.IsZero() || expires.After(limit)) {
		return limit
	}
	return expires
}

// idempotencyKeyHeader is the header that makes POST /v1/principals
// idempotent.
const idempotencyKeyHeader = "Idempotency-Key"

// validIdempotencyKey reports whether k is 1 to 255 visible ASCII
// characters.
func validIdempotencyKey(k string) bool {
	if len(k) == 0 || len(k) > 255 {
		return false
	}
	for i := range len(k) {
		if k[i] < '!' || k[i] > '~' {
			return false
		}
	}
	return true
}

// The page size of GET /v1/principals: by default, and at most.
const (
	principalsPage    = 100
	principalsPageMax = 1000
)

// principalEntry is one principal as GET /v1/principals lists it.
type principalEntry struct {
	PrincipalID string     `json:"principal_id"`
	Name        string     `json:"name"`
	Role        *string    `json:"role"` // see roleOf
	CreatedAt   time.Time  `json:"created_at"`
	RevokedAt   *time.Time `json:"revoked_at"`
	// CreatedBy is the admin that added it over HTTP; null when an
	// operator did.
	CreatedBy *string `json:"created_by"`
}

// roleOf is the role of p as the admin routes answer it: null for an
// OpenID Connect subject, whose role its issuer's tokens say, token by
// token, and which no stored role could tell truly.
func roleOf(p ledger.Principal) *string {
	if p.Role == "" {
		return nil
	}
	return &p.Role
}

// ListPrincipals takes GET /v1/principals?after=ID&limit=N: a page
// of the principals in id order, and the after of the next page while
// there may be one. It lists the rows of principals: an OpenID Connect
// subject has one only once revoked, since intake writes nothing when it
// takes an issuer's token (docs/operations.md, "OpenID Connect", says
// where an operator finds the others).
func (a *Admin) ListPrincipals(w http.ResponseWriter, r *http.Request) {
	if _, ok := a.admin(w, r); !ok {
		return
	}
	after, limit, ok := pageQuery(w, r)
	if !ok {
		return
	}
	var ps []ledger.Principal
	err := a.ask(r, func() error {
		var err error
		ps, err = a.store.PrincipalsAfter(r.Context(), after, limit)
		return err
	})
	if err != nil {
		a.ledger.LedgerFailed(w, r, "principal list failed", err)
		return
	}
	out := struct {
		Principals []principalEntry `json:"principals"`
		NextAfter  string           `json:"next_after,omitempty"`
	}{Principals: make([]principalEntry, len(ps))}
	for i, p := range ps {
		out.Principals[i] = principalEntry{PrincipalID: p.ID, Name: p.Name, Role: roleOf(p), CreatedAt: p.CreatedAt, RevokedAt: p.RevokedAt}
		if p.CreatedBy != "" {
			out.Principals[i].CreatedBy = &p.CreatedBy
		}
	}
	if len(ps) == limit {
		out.NextAfter = ps[len(ps)-1].ID
	}
	problem.JSON(w, http.StatusOK, out)
}

// pageQuery reads ?after=ID&limit=N, or answers 400 naming the one that
// is wrong and returns false.
func pageQuery(w http.ResponseWriter, r *http.Request) (after string, limit int, ok bool) {
	q := r.URL.Query()
	after, limit = q.Get("after"), principalsPage
	if after != "" && !vote.ValidID(after) {
		problem.Write(w, http.StatusBadRequest, problem.BadRequest,
			fmt.Sprintf("the query parameter \"after\" is %s: give the principal id next_after named, or none for the first page", problem.DescribeID(after)), 0)
		return "", 0, false
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > principalsPageMax {
			problem.Write(w, http.StatusBadRequest, problem.BadRequest,
				fmt.Sprintf("the query parameter \"limit\" is %s: give a whole number from 1 to %d", problem.Quote(v), principalsPageMax), 0)
			return "", 0, false
		}
		limit = n
	}
	return after, limit, true
}

// RevokePrincipal takes POST /v1/principals/{principal_id}/revoke:
// 200 with the time it was revoked, the first time or any later one. With
// ?minted=true it revokes too every principal the admin minted over HTTP,
// those they minted, and so on, and answers how many it revoked now.
func (a *Admin) RevokePrincipal(w http.ResponseWriter, r *http.Request) {
	admin, ok := a.admin(w, r)
	if !ok {
		return
	}
	id, ok := problem.PathID(w, r, "principal_id", "principal id")
	if !ok {
		return
	}
	var withMinted bool
	switch v := r.URL.Query().Get("minted"); v {
	case "", "false":
	case "true":
		withMinted = true
	default:
		problem.Write(w, http.StatusBadRequest, problem.BadRequest, fmt.Sprintf(
			"the query parameter \"minted\" is %s: give true to revoke what the principal minted too, or leave it out", problem.Quote(v)), 0)
		return
	}
	var p ledger.Principal
	var minted *int
	err := a.ask(r, func() error {
		ctx := ledger.ActingAs(r.Context(), admin.ID)
		if err := a.store.RevokePrincipal(ctx, id); err != nil {
			return err
		}
		if withMinted {
			n, err := a.store.RevokeMinted(ctx, id)
			if err != nil {
				return err
			}
			minted = &n
		}
		var err error
		p, err = a.store.Principal(r.Context(), id)
		return err
	})
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		problem.Write(w, http.StatusNotFound, problem.NotFound,
			fmt.Sprintf("there is no principal %q: check the id (tally principal list shows them)", id), 0)
	case err != nil:
		a.writeFailed(w, r, err)
	default:
		a.logWrite(r, admin, "principal.revoke", id)
		a.catchUpAfter(r)
		problem.JSON(w, http.StatusOK, struct {
			PrincipalID string     `json:"principal_id"`
			Role        *string    `json:"role"`
			RevokedAt   *time.Time `json:"revoked_at"`
			// MintedRevoked: with ?minted=true, how many principals it
			// minted (down the chain) were revoked now.
			MintedRevoked *int `json:"minted_revoked,omitempty"`
		}{p.ID, roleOf(p), p.RevokedAt, minted})
	}
}
