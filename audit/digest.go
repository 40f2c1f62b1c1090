package audit

import (
	"crypto/sha256"
	"reflect"

	simd "github.com/minio/sha256-simd"
	"golang.org/x/mod/sumdb/tlog"
)

// sum256 is the SHA-256 of b, for the hashes made once per leaf: the
// leaf's own (LeafHash, LeafHasher) and the log's nodes (NodeHash), which
// a rebuild makes for every row of the ledger.
//
// It goes through github.com/minio/sha256-simd where that package drives
// the CPU's SHA instructions (SHA-NI on amd64, SHA2 on arm64): for
// tally's messages (a node is 65 bytes, most leaves under 56), its
// Sum256 costs about a fifth less a call than crypto/sha256's around the
// same instructions, the difference being padding and copying
// (BenchmarkSum256). Where the CPU has no SHA instructions it is
// crypto/sha256, whose assembly (AVX2) is faster there than sha256-simd's
// Sum256, which is then plain Go. Either way the sum is SHA-256's.
func sum256(b []byte) [sha256.Size]byte {
	if simdHardware {
		return simd.Sum256(b)
	}
	return sha256.Sum256(b)
}

// simdHardware says whether sha256-simd drives SHA instructions here:
// its New falls back to crypto/sha256's digest exactly when it does not.
var simdHardware = reflect.TypeOf(simd.New()) != reflect.TypeOf(sha256.New())

// NodeHash is tlog.NodeHash(left, right): the hash of a log's interior
// node, SHA-256 of 0x01 and its two children.
func NodeHash(left, right tlog.Hash) tlog.Hash {
	var node [1 + 2*tlog.HashSize]byte
	node[0] = 1
	copy(node[1:], left[:])
	copy(node[1+tlog.HashSize:], right[:])
	return sum256(node[:])
}
