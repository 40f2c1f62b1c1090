package intake_test

import (
	"bytes"
	"fmt"
	"net/http"
	"sync"
	"testing"
)

// A client that opens many connections at once with its one valid token,
// before intake has cached it, is served on every one: concurrent requests
// with one uncached token share one lookup, which spends nothing of the
// address's allowance of failed authentications (burst 20 by default)
// since the token is valid, so 60 of them are not mistaken for a flood of
// bad tokens. (auth_limit_test.go sends many valid tokens at once.)
func TestConcurrentFirstRequestsOfAValidToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, token := b.principal(t, "kiosk")
	const n = 60
	codes := make([]int, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			req, err := http.NewRequest(http.MethodPost, b.url+"/v1/votes", bytes.NewReader(voteBody(fmt.Sprintf("e-%d", i), "p1", "a")))
			if err != nil {
				t.Error(err)
				return
			}
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := b.client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			codes[i] = resp.StatusCode
		})
	}
	close(start)
	wg.Wait()
	for i, c := range codes {
		if c != http.StatusAccepted {
			t.Errorf("request %d: status %d, want 202", i, c)
		}
	}
}
