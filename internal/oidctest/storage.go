package oidctest

import (
	"context"
	"crypto/rsa"
	"slices"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// This file holds what the provider changes in the example storage, as an
// operator's storage would: its signing keys (so that it can rotate them),
// the expiry of a token asked for with ScopeExpired, and the service
// user's access tokens as JWTs.

// Key is a signing key of the provider: it signs with Private and
// publishes its public key under ID.
type Key struct {
	ID      string
	Private *rsa.PrivateKey
}

// signingKey is k as the provider signs with it (op.SigningKey).
type signingKey struct{ k Key }

func (s signingKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (s signingKey) Key() any                                    { return s.k.Private }
func (s signingKey) ID() string                                  { return s.k.ID }

// publicKey is k as the provider publishes it (op.Key).
type publicKey struct{ k Key }

func (p publicKey) Algorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (p publicKey) Use() string                        { return "sig" }
func (p publicKey) Key() any                           { return &p.k.Private.PublicKey }
func (p publicKey) ID() string                         { return p.k.ID }

// keyStorage is the example storage with keys that rotate, tokens that
// can be asked for expired, and JWT access tokens.
type keyStorage struct {
	*storage.Storage
	mu        sync.Mutex
	signing   Key
	published []Key
}

func (s *keyStorage) SigningKey(context.Context) (op.SigningKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return signingKey{s.signing}, nil
}

func (s *keyStorage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}

func (s *keyStorage) KeySet(context.Context) ([]op.Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]op.Key, len(s.published))
	for i, k := range s.published {
		keys[i] = publicKey{k}
	}
	return keys, nil
}

func (s *keyStorage) ClientCredentials(ctx context.Context, id, secret string) (op.Client, error) {
	c, err := s.Storage.ClientCredentials(ctx, id, secret)
	if err != nil {
		return nil, err
	}
	return jwtAccessTokens{c}, nil
}

type jwtAccessTokens struct{ op.Client }

func (jwtAccessTokens) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeJWT }

func (s *keyStorage) CreateAccessToken(ctx context.Context, req op.TokenRequest) (string, time.Time, error) {
	id, exp, err := s.Storage.CreateAccessToken(ctx, req)
	if slices.Contains(req.GetScopes(), ScopeExpired) {
		exp = time.Now().Add(-time.Hour)
	}
	return id, exp, err
}

// rotate makes k the signing key; it publishes it, and the keys published
// before too if keepOld.
func (s *keyStorage) rotate(k Key, keepOld bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.signing = k
	if keepOld {
		s.published = append(s.published, k)
	} else {
		s.published = []Key{k}
	}
}

func (s *keyStorage) signingKey() Key {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.signing
}
