package credential_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"tally/credential"
)

func newKey(t testing.TB) credential.Key {
	t.Helper()
	k, err := credential.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func verifier(t testing.TB, keys ...credential.Key) *credential.Verifier {
	t.Helper()
	set, err := credential.NewKeySet(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return credential.NewVerifier(set)
}

func TestIssueVerify(t *testing.T) {
	t.Parallel()
	k := newKey(t)
	created := time.Date(2026, 11, 30, 12, 0, 0, 500, time.UTC)
	expires := time.Now().Add(time.Hour).Truncate(time.Second)
	tok, err := k.Issue("p-alice", created, expires)
	if err != nil {
		t.Fatal(err)
	}
	id, err := verifier(t, k).Verify(context.Background(), tok)
	if err != nil {
		t.Fatal(err)
	}
	want := credential.Identity{PrincipalID: "p-alice", CreatedAt: created.Truncate(time.Second), ExpiresAt: expires,
		Issuer: credential.Issuer, KeyID: k.ID}
	if !id.CreatedAt.Equal(want.CreatedAt) || !id.ExpiresAt.Equal(want.ExpiresAt) || id.PrincipalID != want.PrincipalID ||
		id.Issuer != want.Issuer || id.KeyID != want.KeyID {
		t.Fatalf("identity %+v, want %+v", id, want)
	}
	// Without expiry.
	tok, err = k.Issue("p-bob", created, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if id, err := verifier(t, k).Verify(context.Background(), tok); err != nil || !id.ExpiresAt.IsZero() {
		t.Fatalf("a token without expiry: %+v, %v", id, err)
	}
}

func TestIssueRefusesBadPrincipalID(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"", "has space", strings.Repeat("x", 65)} {
		if _, err := newKey(t).Issue(id, time.Now(), time.Time{}); err == nil {
			t.Errorf("Issue(%q) succeeded", id)
		}
	}
}

// TestVerifyRefuses: every way a token can be wrong is refused with
// ErrInvalid.
func TestVerifyRefuses(t *testing.T) {
	t.Parallel()
	k, other := newKey(t), newKey(t)
	now := time.Now()
	good, err := k.Issue("p-alice", now, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	byOther, _ := other.Issue("p-alice", now, now.Add(time.Hour))
	expired, _ := k.Issue("p-alice", now, now.Add(-time.Minute))
	parts := strings.Split(good, ".")
	tamperedPayload := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"iss":"tally","sub":"p-mallory","created":1}`)) + "." + parts[2]
	noneHeader := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","kid":"` + k.ID + `"}`))
	algNone := noneHeader + "." + parts[1] + "."
	// Another key id in the header, the signature unchanged.
	otherKid := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","kid":"`+other.ID+`","typ":"JWT"}`)) + "." + parts[1] + "." + parts[2]

	cases := map[string]string{
		"empty":            "",
		"garbage":          "not a token",
		"truncated":        good[:len(good)-5],
		"no signature":     parts[0] + "." + parts[1] + ".",
		"tampered payload": tamperedPayload,
		"unknown key":      byOther,
		"another kid":      otherKid,
		"expired":          expired,
		"alg none":         algNone,
		"wrong issuer":     signWith(t, k, jwt.Claims{Issuer: "evil", Subject: "p-alice"}),
		"not yet valid":    signWith(t, k, jwt.Claims{Issuer: credential.Issuer, Subject: "p-alice", NotBefore: jwt.NewNumericDate(now.Add(time.Hour))}),
		"bad subject":      signWith(t, k, jwt.Claims{Issuer: credential.Issuer, Subject: "p alice"}),
		"ed25519":          signEd25519(t, k.ID),
	}
	v := verifier(t, k)
	for name, tok := range cases {
		id, err := v.Verify(context.Background(), tok)
		if !errors.Is(err, credential.ErrInvalid) {
			t.Errorf("%s: Verify = %+v, %v; want ErrInvalid", name, id, err)
		}
	}
	if _, err := v.Verify(context.Background(), good); err != nil {
		t.Fatalf("the good token: %v", err)
	}
}

// TestVerifyEveryByteMatters: a verifier earns trust by rejecting. Every
// change of one character of a valid token is refused, or (where base64
// leaves a bit unused) verifies to the same identity.
func TestVerifyEveryByteMatters(t *testing.T) {
	t.Parallel()
	k := newKey(t)
	now := time.Now()
	good, err := k.Issue("p-alice", now, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	v := verifier(t, k)
	want, err := v.Verify(context.Background(), good)
	if err != nil {
		t.Fatal(err)
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_."
	for i := range len(good) {
		for _, c := range []byte{alphabet[(strings.IndexByte(alphabet, good[i])+1)%len(alphabet)], '='} {
			b := []byte(good)
			b[i] = c
			id, err := v.Verify(context.Background(), string(b))
			if err == nil && id != want {
				t.Fatalf("byte %d changed to %q verifies as %+v", i, c, id)
			}
			if err != nil && !errors.Is(err, credential.ErrInvalid) {
				t.Fatalf("byte %d changed: %v, not ErrInvalid", i, err)
			}
		}
	}
}

func TestKeyRoundTrip(t *testing.T) {
	t.Parallel()
	k := newKey(t)
	data, err := k.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	back, err := credential.ParseKey(data)
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := k.Issue("p-a", time.Now(), time.Time{})
	if _, err := verifier(t, back).Verify(context.Background(), tok); err != nil {
		t.Fatalf("a key read back does not verify its own token: %v", err)
	}
	if !strings.HasPrefix(k.ID, "k-") || len(k.ID) != 18 {
		t.Errorf("key id %q", k.ID)
	}
	edited := strings.Replace(string(data), k.ID, "k-0000000000000000", 1)
	if _, err := credential.ParseKey([]byte(edited)); err == nil || !strings.Contains(err.Error(), "changed") {
		t.Errorf("a key with an edited kid: %v", err)
	}
	for _, bad := range []string{`{}`, `not json`, `{"kty":"oct","alg":"HS512","k":"` + strings.Repeat("A", 43) + `"}`,
		`{"kty":"oct","alg":"HS256","k":"AAAA"}`} {
		if _, err := credential.ParseKey([]byte(bad)); err == nil {
			t.Errorf("ParseKey(%s) succeeded", bad)
		}
	}
	if _, err := credential.NewKeySet(k, back); err == nil {
		t.Error("a key set with one key twice")
	}
}

func TestPrincipalIDFor(t *testing.T) {
	t.Parallel()
	a := credential.PrincipalIDFor("https://id.example.org", "alice")
	if a != credential.PrincipalIDFor("https://id.example.org", "alice") {
		t.Fatal("not stable")
	}
	for _, other := range []string{
		credential.PrincipalIDFor("https://id.example.org", "alice2"),
		credential.PrincipalIDFor("https://id.example.org/", "alice"),
		credential.PrincipalIDFor("https://id.example.com", "alice"),
	} {
		if other == a {
			t.Fatalf("two (iss, sub) give %s", a)
		}
	}
	if len(a) != 42 || !strings.HasPrefix(a, "o-") || strings.Contains(a, "alice") {
		t.Fatalf("id %q", a)
	}
}

// signWith signs claims c (a jwt.Claims, a map: whatever they say) by
// k under its key id, as Issue would.
func signWith(t testing.TB, k credential.Key, c any) string {
	t.Helper()
	raw, err := k.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var jwk jose.JSONWebKey
	if err := jwk.UnmarshalJSON(raw); err != nil {
		t.Fatal(err)
	}
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: jwk.Key}, (&jose.SignerOptions{}).WithHeader("kid", k.ID))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(sig).Claims(c).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func signEd25519(t testing.TB, kid string) string {
	t.Helper()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: priv}, (&jose.SignerOptions{}).WithHeader("kid", kid))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(sig).Claims(jwt.Claims{Issuer: credential.Issuer, Subject: "p-alice"}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestValidKeyID: every generated key's id has the form; ids one
// character off do not.
func TestValidKeyID(t *testing.T) {
	t.Parallel()
	k := newKey(t)
	if !credential.ValidKeyID(k.ID) {
		t.Fatalf("a generated key's id %q is refused", k.ID)
	}
	for _, id := range []string{"", "k-", "k-doesnotexist00", "k-0123456789abcde", "k-0123456789abcdef0",
		"K-0123456789abcdef", "k-0123456789ABCDEF", "k_0123456789abcdef", "x-0123456789abcdef", "k-0123456789abcdeg"} {
		if credential.ValidKeyID(id) {
			t.Errorf("%q taken as a key id", id)
		}
	}
	if !credential.ValidKeyID("k-0123456789abcdef") {
		t.Error("k-0123456789abcdef refused")
	}
}
