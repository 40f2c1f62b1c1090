package credential_test

import (
	"crypto/rand"
	"crypto/rsa"
	"syscall"
	"testing"
	"time"

	josev4 "github.com/go-jose/go-jose/v4"
	josejwt "github.com/go-jose/go-jose/v4/jwt"
	gojwt "github.com/golang-jwt/jwt/v5"
	"github.com/lestrrat-go/jwx/v3/jwa"
	jwxjwt "github.com/lestrrat-go/jwx/v3/jwt"
)

// BenchmarkJWTLibraries compares three JWT libraries on what intake does
// with every vote's token: parse it, verify its signature (HS256, as
// tally's own tokens; RS256, as an OpenID Connect issuer's) and decode its
// claims, tally's "created" among them, checking issuer and expiry.
// golang-jwt/v5 is the one tally uses; go-jose/v4 is what go-oidc builds
// on; lestrrat-go/jwx/v3 is the third well-kept one. BENCHMARKS.md has a
// run; the test below keeps each of them honest (a wrong key is refused).
// Besides the time per token it reports this process's CPU time per token
// (cpu-µs/op), which other load on the machine moves less.
func BenchmarkJWTLibraries(b *testing.B) {
	for _, alg := range jwtAlgs(b) {
		for _, lib := range jwtLibs {
			b.Run(alg.name+"/"+lib.name, func(b *testing.B) {
				verify := lib.verifier(alg)
				b.ReportAllocs()
				cpu0 := processCPU(b)
				for b.Loop() {
					if created, err := verify(alg.token); err != nil || created != jwtCreated {
						b.Fatalf("%s: created %d, %v", lib.name, created, err)
					}
				}
				b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			})
		}
	}
}

// TestJWTLibrariesRefuse: each library of BenchmarkJWTLibraries takes the
// token it is benchmarked on and refuses it under another key, so the
// benchmark times a verification.
func TestJWTLibrariesRefuse(t *testing.T) {
	algs, fresh := jwtAlgs(t), jwtAlgs(t)
	for i, alg := range algs {
		other := algs[(i+1)%len(algs)]
		wrong := alg
		wrong.verifyKey = fresh[i].verifyKey // another key of the same kind
		for _, lib := range jwtLibs {
			if created, err := lib.verifier(alg)(alg.token); err != nil || created != jwtCreated {
				t.Errorf("%s %s: created %d, %v; want %d", alg.name, lib.name, created, err, jwtCreated)
			}
			if _, err := lib.verifier(wrong)(alg.token); err == nil {
				t.Errorf("%s %s took the token under another key", alg.name, lib.name)
			}
			if _, err := lib.verifier(alg)(other.token); err == nil {
				t.Errorf("%s %s took a token of %s", alg.name, lib.name, other.name)
			}
		}
	}
}

const jwtCreated = 1_790_000_000

// processCPU is the CPU time this process has used, user and system.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// jwtAlg is a token signed with one algorithm and the key that verifies it.
type jwtAlg struct {
	name      string
	token     string
	gojwt     gojwt.SigningMethod
	jose      josev4.SignatureAlgorithm
	jwx       jwa.SignatureAlgorithm
	verifyKey any
}

// jwtAlgs signs tally's claims with a new key of each algorithm.
func jwtAlgs(tb testing.TB) []jwtAlg {
	secret := make([]byte, 32)
	rand.Read(secret)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		tb.Fatal(err)
	}
	claims := gojwt.MapClaims{"iss": "tally", "sub": "p-0123456789abcdef01234567", "created": jwtCreated,
		"iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}
	sign := func(m gojwt.SigningMethod, key any) string {
		t := gojwt.NewWithClaims(m, claims)
		t.Header["kid"] = "k1"
		s, err := t.SignedString(key)
		if err != nil {
			tb.Fatal(err)
		}
		return s
	}
	return []jwtAlg{
		{name: "HS256", token: sign(gojwt.SigningMethodHS256, secret), gojwt: gojwt.SigningMethodHS256,
			jose: josev4.HS256, jwx: jwa.HS256(), verifyKey: secret},
		{name: "RS256", token: sign(gojwt.SigningMethodRS256, rsaKey), gojwt: gojwt.SigningMethodRS256,
			jose: josev4.RS256, jwx: jwa.RS256(), verifyKey: &rsaKey.PublicKey},
	}
}

// jwtLib makes the verification of one library: it returns the token's
// "created" claim.
type jwtLib struct {
	name     string
	verifier func(jwtAlg) func(token string) (int64, error)
}

var jwtLibs = []jwtLib{
	{"golang-jwt-v5", func(a jwtAlg) func(string) (int64, error) {
		type claims struct {
			gojwt.RegisteredClaims
			Created int64 `json:"created"`
		}
		p := gojwt.NewParser(gojwt.WithValidMethods([]string{a.gojwt.Alg()}), gojwt.WithIssuer("tally"),
			gojwt.WithExpirationRequired())
		keyFunc := func(*gojwt.Token) (any, error) { return a.verifyKey, nil }
		return func(token string) (int64, error) {
			var c claims
			_, err := p.ParseWithClaims(token, &c, keyFunc)
			return c.Created, err
		}
	}},
	{"go-jose-v4", func(a jwtAlg) func(string) (int64, error) {
		type claims struct {
			josejwt.Claims
			Created int64 `json:"created"`
		}
		algs := []josev4.SignatureAlgorithm{a.jose}
		return func(token string) (int64, error) {
			t, err := josejwt.ParseSigned(token, algs)
			if err != nil {
				return 0, err
			}
			var c claims
			if err := t.Claims(a.verifyKey, &c); err != nil {
				return 0, err
			}
			if c.Expiry == nil {
				return 0, josejwt.ErrExpired
			}
			return c.Created, c.Validate(josejwt.Expected{Issuer: "tally", Time: time.Now()})
		}
	}},
	{"jwx-v3", func(a jwtAlg) func(string) (int64, error) {
		return func(token string) (int64, error) {
			t, err := jwxjwt.ParseString(token, jwxjwt.WithKey(a.jwx, a.verifyKey), jwxjwt.WithIssuer("tally"),
				jwxjwt.WithRequiredClaim("exp"))
			if err != nil {
				return 0, err
			}
			var created float64
			if err := t.Get("created", &created); err != nil {
				return 0, err
			}
			return int64(created), nil
		}
	}},
}
