// Package credential is the one home of the rule of who a request is. It
// issues and verifies bearer tokens with no database and no network on
// the request's path:
//
//   - tally's own tokens: JWTs (RFC 7519) signed with HMAC-SHA256 by one of
//     the deployment's credential keys. A token names its principal
//     ("sub"), the principal's creation time ("created", seconds since the
//     Unix epoch, rounded down), its key ("kid" in the header), its issuer
//     ("iss": "tally") and optionally its expiry ("exp"). Verifying one
//     takes a few microseconds of CPU (BenchmarkVerify).
//   - tokens of an OpenID Connect issuer the operator trusts, checked
//     against the issuer's keys (its JWKS, found by discovery, refreshed in
//     the background and kept while the issuer does not answer), its
//     audience, and their expiry. Such a principal's id is PrincipalIDFor
//     its (issuer, subject): no e-mail or name reaches the ledger.
//
// A Verifier chooses the keys by the token's "iss", read before anything is
// verified: "tally" is checked against the KeySet, the URL of a configured
// OIDCIssuer against that issuer's keys, and any other issuer is refused.
// The unverified "iss" only chooses; the keys it chose check it again.
//
// An OIDCIssuer fetches its keys in Run, never on a request's path. Until
// the first fetch succeeds its tokens get ErrUnavailable (a 503, not a
// 401); after that the last key set fetched is kept, whatever the issuer
// does, until a later fetch succeeds. A token signed by a key id the set
// does not hold is refused at once, and asks Run for an early fetch, at
// most one per OIDCConfig.MinRefresh however many such tokens come, so
// that the next token of a rotated key verifies and a flood of made-up key
// ids cannot make intake hammer the issuer. A token that names no key id
// is checked against the issuer's one key of its algorithm, and refused
// where the issuer holds several: it is never tried against each.
//
// Why HMAC and not a signature: a credential key is held by whoever issues
// tokens (tally principal add) and whoever verifies them (every intake),
// and an intake can already enqueue any vote, so a key that only verifies
// would protect nothing more, while HMAC-SHA256 verifies in about a
// twentieth of Ed25519's time (BenchmarkVerify against
// BenchmarkVerifyEd25519). Tally's tokens are made and read by
// github.com/golang-jwt/jwt/v5, which verifies one in half the time and a
// third of the allocations go-jose takes (BENCHMARKS.md); it is told the
// one algorithm it may take, so "alg": "none" or a public key used as an
// HMAC secret is refused; their claims, when of the form Issue writes, are
// decoded without reflection (claims.go), and their signature is checked
// with an HMAC kept per key and reused (hs256.go). OpenID Connect tokens are verified by
// github.com/coreos/go-oidc/v3. Key files are JSON Web Keys (RFC 7517).
//
// Several keys verify and one signs: a KeySet holds every key an intake
// accepts, a Key signs. Rotation is: generate a key, give it to every
// intake beside the old one, issue with it, reissue the old tokens, then
// retire the old key id (tally credential key retire) and drop it.
//
// What a token cannot say is whether its principal or key was revoked,
// or its principal reissued a token, since it was issued: the caller
// checks the Identity (its principal, key and issue time) against the
// revocations it holds (intake keeps them in memory).
package credential
