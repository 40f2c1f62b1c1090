package audit

import (
	"crypto/sha256"
	"fmt"
	"testing"

	"golang.org/x/mod/sumdb/tlog"
)

// TestSum256 checks both ways sum256 may go against crypto/sha256, at
// every length around the one and two blocks tally's messages take, and
// NodeHash against tlog's.
func TestSum256(t *testing.T) {
	hardware := simdHardware
	t.Cleanup(func() { simdHardware = hardware })
	buf := make([]byte, 300)
	for i := range buf {
		buf[i] = byte(i*7 + 3)
	}
	for _, simd := range []bool{hardware, false} {
		simdHardware = simd
		for n := range len(buf) + 1 {
			if got, want := sum256(buf[:n]), sha256.Sum256(buf[:n]); got != want {
				t.Fatalf("sha256-simd in use %v: sum256 of %d bytes is %x, want %x", simd, n, got, want)
			}
		}
		l, r := tlog.Hash(sha256.Sum256([]byte("left"))), tlog.Hash(sha256.Sum256([]byte("right")))
		if got, want := NodeHash(l, r), tlog.NodeHash(l, r); got != want {
			t.Fatalf("sha256-simd in use %v: NodeHash is %x, want tlog's %x", simd, got, want)
		}
	}
}

var sumSink [sha256.Size]byte

// BenchmarkSum256 is sum256 against crypto/sha256's (the baseline) for a
// typical ballot leaf (50 bytes: one block) and a log node (65 bytes:
// two). Run with -v, it says which way sum256 goes on this CPU.
func BenchmarkSum256(b *testing.B) {
	b.Logf("sha256-simd with SHA instructions: %v", simdHardware)
	for _, n := range []int{50, 65} {
		buf := make([]byte, n)
		b.Run(fmt.Sprintf("crypto-sha256/%d", n), func(b *testing.B) {
			for b.Loop() {
				sumSink = sha256.Sum256(buf)
			}
		})
		b.Run(fmt.Sprintf("sum256/%d", n), func(b *testing.B) {
			for b.Loop() {
				sumSink = sum256(buf)
			}
		})
	}
}
