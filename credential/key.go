package credential

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"
)

// keyBytes is the size of a credential key's secret: 256 bits, as RFC 7518
// 3.2 asks of an HS256 key.
const keyBytes = 32

// Key is one credential key: a secret that signs and verifies tally's own
// tokens, and its id, which every token it signs names.
type Key struct {
	ID     string
	secret []byte
}

// GenerateKey makes a new key from crypto/rand. Its id is derived from the
// secret ("k-" and 16 hex digits of a hash of it), so that it names the
// key without revealing it.
func GenerateKey() (Key, error) {
	secret := make([]byte, keyBytes)
	if _, err := rand.Read(secret); err != nil {
		return Key{}, fmt.Errorf("generate credential key: %w", err)
	}
	return newKey(secret), nil
}

func newKey(secret []byte) Key {
	h := sha256.Sum256(append([]byte("tally credential key id\n"), secret...))
	return Key{ID: keyIDPrefix + hex.EncodeToString(h[:keyIDHashBytes]), secret: secret}
}

// A key id is keyIDPrefix and keyIDHashBytes bytes of a hash in lower-case
// hex: "k-" and 16 hex digits.
const (
	keyIDPrefix    = "k-"
	keyIDHashBytes = 8
)

// KeyIDRule says in words what ValidKeyID checks, for messages.
const KeyIDRule = "k- and 16 lower-case hex digits"

// ValidKeyID reports whether id has the form of a credential key's id
// (KeyIDRule), as GenerateKey makes them.
func ValidKeyID(id string) bool {
	digits, ok := strings.CutPrefix(id, keyIDPrefix)
	if !ok || len(digits) != 2*keyIDHashBytes {
		return false
	}
	for _, c := range []byte(digits) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// MarshalJSON writes the key as a JSON Web Key (RFC 7517): kty "oct", alg
// "HS256", use "sig", its kid and its secret in k. It is a secret: keep
// the file it goes to at mode 0600.
func (k Key) MarshalJSON() ([]byte, error) {
	return json.Marshal(jose.JSONWebKey{Key: k.secret, KeyID: k.ID, Algorithm: string(jose.HS256), Use: "sig"})
}

// ParseKey reads a key written by MarshalJSON. It refuses a JSON Web Key
// of another type or algorithm, a secret shorter than 256 bits, and a kid
// that is not the one the secret gives (a key file edited by hand).
func ParseKey(data []byte) (Key, error) {
	var jwk jose.JSONWebKey
	if err := jwk.UnmarshalJSON(data); err != nil {
		return Key{}, fmt.Errorf("not a JSON Web Key: %w", err)
	}
	secret, ok := jwk.Key.([]byte)
	switch {
	case !ok:
		return Key{}, errors.New(`not a credential key: its "kty" must be "oct" (tally credential key generate writes one)`)
	case jwk.Algorithm != string(jose.HS256):
		return Key{}, fmt.Errorf(`not a credential key: its "alg" is %q, not "HS256"`, jwk.Algorithm)
	case len(secret) < keyBytes:
		return Key{}, fmt.Errorf("the key's secret is %d bytes; it must be at least %d", len(secret), keyBytes)
	}
	k := newKey(secret)
	if jwk.KeyID != k.ID {
		return Key{}, fmt.Errorf("the key's kid is %q, but its secret gives %q: the file was changed; generate a new key", jwk.KeyID, k.ID)
	}
	return k, nil
}

// ReadKeyFile reads the key in the file at path.
func ReadKeyFile(path string) (Key, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Key{}, fmt.Errorf("credential key: %w (tally credential key generate writes one)", err)
	}
	k, err := ParseKey(data)
	if err != nil {
		return Key{}, fmt.Errorf("credential key %s: %w", path, err)
	}
	return k, nil
}

// KeySet is the keys that verify tally's own tokens, by id.
type KeySet struct {
	keys map[string]Key
	macs map[string]*macKey // the HMACs of keys, by id
	// keyFunc is keyFor, made once: a method value made per token would
	// be an allocation per token.
	keyFunc jwt.Keyfunc
}

// NewKeySet is the set of keys; an id given twice is an error.
func NewKeySet(keys ...Key) (*KeySet, error) {
	s := &KeySet{keys: make(map[string]Key, len(keys)), macs: make(map[string]*macKey, len(keys))}
	for _, k := range keys {
		if _, dup := s.keys[k.ID]; dup {
			return nil, fmt.Errorf("credential key %s is given twice", k.ID)
		}
		s.keys[k.ID] = k
		s.macs[k.ID] = newMACKey(k.secret)
	}
	s.keyFunc = s.keyFor
	return s, nil
}

// ReadKeySet reads each file in paths as a key.
func ReadKeySet(paths []string) (*KeySet, error) {
	keys := make([]Key, 0, len(paths))
	for _, p := range paths {
		k, err := ReadKeyFile(p)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return NewKeySet(keys...)
}

// Has reports whether the set holds the key of id.
func (s *KeySet) Has(id string) bool {
	if s == nil {
		return false
	}
	_, ok := s.keys[id]
	return ok
}

// IDs are the ids of the keys of the set, sorted.
func (s *KeySet) IDs() []string {
	if s == nil {
		return nil
	}
	ids := slices.Collect(maps.Keys(s.keys))
	slices.Sort(ids)
	return ids
}

// Len is the number of keys in the set.
func (s *KeySet) Len() int {
	if s == nil {
		return 0
	}
	return len(s.keys)
}
