package credential

import (
	"encoding/base64"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// claimsSeeds are claims of the form Issue writes, and of others that the
// fast path leaves to encoding/json.
var claimsSeeds = []string{
	`{"iss":"tally","sub":"p-1","iat":1765000000,"created":1764999000}`,
	`{"iss":"tally","sub":"p-1","exp":1765003600,"iat":1765000000,"created":1764999000,"role":"admin"}`,
	` { "iss" : "tally" , "sub" : "p_2" , "nbf" : -5 , "created" : 0 } `,
	`{}`,
	`{"sub":"a","sub":"b"}`,
	`{"iss":"ta\u006cly","sub":"p-1"}`,
	`{"iss":"tally","sub":"p\\1"}`,
	`{"iss":"tally","sub":"é"}`,
	`{"ISS":"tally","Sub":"p-1"}`,
	`{"iss":"tally","aud":["x","y"],"jti":"j"}`,
	`{"iss":"tally","exp":1765003600.7,"iat":1.765e9}`,
	`{"exp":9007199254740993,"iat":-9007199254740993}`,
	`{"created":9223372036854775808}`,
	`{"created":1.5}`,
	`{"created":01}`,
	`{"created":-}`,
	`{"exp":null,"role":null}`,
	`{"extra":{"a":[1,2]},"iss":"tally"}`,
	`{"iss":"tally",}`,
	`{"iss":"tally"`,
	`{"iss":"tally"} x`,
	`[]`,
	`"tally"`,
}

// decodePlain is encoding/json's decoding of claims, without the fast path.
func decodePlain(b []byte) (claims, error) {
	type plain claims
	var c plain
	err := json.Unmarshal(b, &c)
	return claims(c), err
}

// TestClaimsDecodeLikeEncodingJSON: the claims Issue writes take the fast
// path, and every seed decodes to what encoding/json makes of it.
func TestClaimsDecodeLikeEncodingJSON(t *testing.T) {
	for _, s := range claimsSeeds[:3] {
		var c claims
		if !c.scan([]byte(s)) {
			t.Errorf("%s: not read by the fast path", s)
		}
	}
	k, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := k.IssueRole("p-0123", RoleAdmin, time.Unix(1764999000, 0), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	seg := tokenClaims(t, tok)
	var c claims
	if !c.scan(seg) {
		t.Errorf("the claims Issue wrote, %s, are not read by the fast path", seg)
	}
	for _, s := range claimsSeeds {
		checkClaimsDecode(t, []byte(s))
	}
}

// FuzzClaimsDecode: claims.UnmarshalJSON decodes any input as
// encoding/json does, and refuses what it refuses.
func FuzzClaimsDecode(f *testing.F) {
	for _, s := range claimsSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkClaimsDecode(t, b)
	})
}

func checkClaimsDecode(t *testing.T, b []byte) {
	t.Helper()
	want, wantErr := decodePlain(b)
	var got claims
	gotErr := json.Unmarshal(b, &got)
	if (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("%q: error %v, encoding/json's %v", b, gotErr, wantErr)
	}
	// The dates are compared where they point (DeepEqual follows
	// pointers); where the fast path keeps them is its own.
	same := reflect.DeepEqual(got.RegisteredClaims, want.RegisteredClaims) && got.Created == want.Created && got.Role == want.Role
	if gotErr == nil && !same {
		t.Fatalf("%q: decoded %+v, encoding/json %+v", b, got, want)
	}
}

// tokenClaims is the decoded claims segment of token.
func tokenClaims(t *testing.T, token string) []byte {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("token %q has %d parts", token, len(parts))
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	return b
}
