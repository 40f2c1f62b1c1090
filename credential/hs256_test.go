package credential

import (
	"errors"
	"sync"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// TestHS256ReusedMAC: golang-jwt's registry gives hs256 for HS256; with a
// *macKey it takes exactly the signatures golang-jwt's own HS256 makes,
// from goroutines that share the key's HMACs, and refuses every other one;
// with an []byte key it is golang-jwt's own.
func TestHS256ReusedMAC(t *testing.T) {
	t.Parallel()
	if m := jwt.GetSigningMethod("HS256"); m != signingHS256 {
		t.Fatalf("golang-jwt's registry gives %T for HS256, want hs256", m)
	}
	k, other := newKey(make([]byte, keyBytes)), newKey([]byte("another secret of thirty-two bytes"))
	mk := newMACKey(k.secret)
	msgs := []string{"", "a", "eyJhbGciOiJIUzI1NiJ9.eyJpc3MiOiJ0YWxseSJ9", string(make([]byte, 1000))}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for range 50 {
				for i, msg := range msgs {
					sig, err := jwt.SigningMethodHS256.Sign(msg, k.secret)
					if err != nil {
						t.Error(err)
						return
					}
					if err := signingHS256.Verify(msg, sig, mk); err != nil {
						t.Errorf("goroutine %d, message %d: its own signature refused: %v", g, i, err)
					}
					wrong, _ := jwt.SigningMethodHS256.Sign(msg, other.secret)
					if err := signingHS256.Verify(msg, wrong, mk); !errors.Is(err, jwt.ErrSignatureInvalid) {
						t.Errorf("message %d: another key's signature: %v, want ErrSignatureInvalid", i, err)
					}
					if err := signingHS256.Verify(msg, sig[:len(sig)-1], mk); err == nil {
						t.Errorf("message %d: a signature cut short was taken", i)
					}
					if err := signingHS256.Verify(msg+"x", sig, mk); err == nil {
						t.Errorf("message %d: the signature of another message was taken", i)
					}
				}
			}
		})
	}
	wg.Wait()
	sig, _ := jwt.SigningMethodHS256.Sign("m", k.secret)
	if err := signingHS256.Verify("m", sig, k.secret); err != nil {
		t.Fatalf("with an []byte key: %v", err)
	}
	if err := signingHS256.Verify("m", sig, other.secret); err == nil {
		t.Fatal("with another []byte key the signature was taken")
	}
}
