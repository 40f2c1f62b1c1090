package credential_test

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkVerifyUnseen is BenchmarkVerify with a token never verified
// before each time, as in a burst of new voters: b.N tokens, each of a
// principal of its own, signed before the timer starts. Besides the time
// per token it reports this process's CPU time per token (cpu-µs/op).
func BenchmarkVerifyUnseen(b *testing.B) {
	k := newKey(b)
	now := time.Now()
	tokens := make([]string, b.N)
	for i := range tokens {
		tok, err := k.Issue(fmt.Sprintf("p-%024d", i), now, now.Add(time.Hour))
		if err != nil {
			b.Fatal(err)
		}
		tokens[i] = tok
	}
	v := verifier(b, k)
	ctx := context.Background()
	b.ReportAllocs()
	cpu0 := processCPU(b)
	b.ResetTimer()
	for i := range b.N {
		if _, err := v.Verify(ctx, tokens[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}
