package credential

import (
	"crypto/sha256"
	"encoding/base64"
)

// PrincipalIDFor is the principal id of the subject sub of the OpenID
// Connect issuer iss: "o-" and the first 30 bytes of
// SHA-256("tally oidc principal\n" || iss || "\n" || sub), in unpadded
// base64url (40 characters, 42 in all). The same (iss, sub) always gives
// the same id, distinct (iss, sub) give distinct ids, and neither can be
// read back from it, so no e-mail or name reaches the ledger. iss is the
// issuer exactly as its tokens' "iss" spells it.
func PrincipalIDFor(iss, sub string) string {
	h := sha256.New()
	h.Write([]byte("tally oidc principal\n"))
	h.Write([]byte(iss))
	h.Write([]byte("\n"))
	h.Write([]byte(sub))
	return "o-" + base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:30])
}
