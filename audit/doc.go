// Package audit is tally's offline verifier: the leaf encoding of a poll's
// Merkle log, signed checkpoints, inclusion and consistency proofs, and the
// recount of an exported ledger against them. It imports no database or
// Redis driver, so an auditor can read all of it, and it needs nothing but
// the files it is given.
//
// Each poll's ledger rows, in ledger order, are the leaves 0..n-1 of an
// RFC 6962 Merkle tree: a leaf's hash is SHA-256(0x00 || leaf), a node's
// SHA-256(0x01 || left || right). The leaf is the canonical byte encoding
// of the row that EncodeLeaf writes and docs/audit.md specifies, versioned
// by its first byte. The tree and its proofs are golang.org/x/mod/sumdb/tlog's,
// which implements exactly that hashing; this package adds the leaf, the
// checkpoint and the errors that name what did not verify.
package audit
