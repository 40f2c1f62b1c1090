package credential

import (
	"crypto/hmac"
	"crypto/sha256"
	"hash"
	"sync"
	"unsafe"

	"github.com/golang-jwt/jwt/v5"
)

// This file owns the check of the HS256 signature of tally's own tokens:
// one HMAC-SHA256 keyed per credential key and reused (macKey), where
// golang-jwt's HS256 makes one per token (a token's check on every vote;
// BENCHMARKS.md has the figures).

// macKey is a credential key's secret with the HMAC-SHA256 instances
// keyed with it, reused: crypto/hmac's Reset restores the keyed state
// saved at its first Reset, so a reused instance neither allocates nor
// hashes the key's pads again.
type macKey struct {
	macs sync.Pool // of *keyedMAC
}

// keyedMAC is one HMAC-SHA256 instance of a key and the buffer of its sum.
type keyedMAC struct {
	mac hash.Hash
	sum [sha256.Size]byte
}

func newMACKey(secret []byte) *macKey {
	m := &macKey{}
	m.macs.New = func() any { return &keyedMAC{mac: hmac.New(sha256.New, secret)} }
	return m
}

// verify reports whether sig is the HMAC-SHA256 of signingString under
// the key.
func (k *macKey) verify(signingString string, sig []byte) bool {
	m := k.macs.Get().(*keyedMAC)
	defer k.macs.Put(m)
	m.mac.Reset()
	// The string's bytes, not a copy of them: Write only reads them.
	m.mac.Write(unsafe.Slice(unsafe.StringData(signingString), len(signingString)))
	return hmac.Equal(sig, m.mac.Sum(m.sum[:0]))
}

// hs256 is golang-jwt's HS256 that checks a signature with a *macKey's
// reused HMAC, the key KeySet.keyFor gives; any other key goes to
// golang-jwt's own HS256 (the method an []byte key asks for, as when a
// token is issued). golang-jwt finds a token's method by the name of its
// "alg" in a registry of its own, so hs256 is registered under HS256 in
// place of its own (init). Where another package registered HS256 again,
// a *macKey given to that method fails its check of the key's type, and
// the token is refused.
type hs256 struct{ *jwt.SigningMethodHMAC }

// signingHS256 is what the registry of golang-jwt gives for HS256.
var signingHS256 jwt.SigningMethod = hs256{jwt.SigningMethodHS256}

func init() {
	jwt.RegisterSigningMethod(jwt.SigningMethodHS256.Alg(), func() jwt.SigningMethod { return signingHS256 })
}

// Verify checks sig, the signature of signingString, with key.
func (m hs256) Verify(signingString string, sig []byte, key any) error {
	k, ok := key.(*macKey)
	if !ok {
		return m.SigningMethodHMAC.Verify(signingString, sig, key)
	}
	if !k.verify(signingString, sig) {
		return jwt.ErrSignatureInvalid
	}
	return nil
}
