package intake_test

import (
	"bytes"
	"fmt"
	"net/http"
	"sync"
	"testing"
)

// A client that opens many connections at once with its one valid token
// is served on every one: a valid token spends nothing of the address's
// allowance of failed authentications (burst 20 by default), so 60 of
// them at once are not mistaken for a flood of bad tokens.
func TestConcurrentFirstRequestsOfAValidToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, token := b.principal(t, "kiosk")
	const n = 60
	tokens := make([]string, n)
	for i := range tokens {
		tokens[i] = token
	}
	codes := b.postAtOnce(t, tokens, nil)
	for i, c := range codes {
		if c != http.StatusAccepted {
			t.Errorf("request %d: status %d, want 202", i, c)
		}
	}
}

// postAtOnce posts vote e-i with tokens[i], all at once, calls meanwhile
// (when not nil) once they are under way, and returns the status codes in
// order.
func (b *bundle) postAtOnce(t *testing.T, tokens []string, meanwhile func()) []int {
	t.Helper()
	codes := make([]int, len(tokens))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, token := range tokens {
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
	if meanwhile != nil {
		meanwhile()
	}
	wg.Wait()
	return codes
}
