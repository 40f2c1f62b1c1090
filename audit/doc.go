// Package audit is tally's offline verifier: the leaf encoding of a poll's
// Merkle log, signed checkpoints, inclusion and consistency proofs, and the
// recount of an exported ledger against them. It imports no database or
// Redis driver, so an auditor can read all of it, and it needs nothing but
// the files it is given.
//
// Each poll's ledger rows, in ledger order, with the poll's definitions
// among them, are the leaves 0..n-1 of an RFC 6962 Merkle tree: a leaf's hash is SHA-256(0x00 || leaf), a node's
// SHA-256(0x01 || left || right). The leaf is the canonical byte encoding
// of the row that EncodeLeaf writes and docs/audit.md specifies, versioned
// by its first byte. The tree and its proofs are golang.org/x/mod/sumdb/tlog's,
// which implements exactly that hashing; this package adds the leaf, the
// checkpoint and the errors that name what did not verify.
//
// A checkpoint is a tree head (origin, size, root) in the transparency-log
// checkpoint format of github.com/transparency-dev/formats/log, signed as
// a golang.org/x/mod/sumdb/note with the log's Ed25519 key. Its origin,
// Origin(logName, pollID), names the deployment (the key's name) and the
// poll, so a checkpoint of one poll never verifies as another's.
//
// The files:
//
//   - leaf.go: the leaf encoding of a vote (version 1: one choice;
//     version 4: a ballot of another kind, in its canonical form) and its
//     hash.
//   - definition.go: a poll's definition as a leaf (version 2; version 3
//     when its ballot rules are not vote.Single's); definition_judge.go,
//     what it takes of a vote and of the definition after it.
//   - ballot.go: the audit's own reading of a canonical ballot against
//     the definition in force, apart from package vote's on purpose.
//   - lines.go: the line rules every JSON-lines file the audit reads
//     shares (EachLine): the newline, the 1 MiB bound, the white space
//     around a line.
//   - json_text.go: free text read from JSON (a poll's title) refused
//     when readers would decode it differently (CheckJSONString).
//   - export_line.go: the export's line, written and read strictly;
//     export_definition.go, a definition's line; export_line_written.go,
//     the fast path for a vote's line as tally writes it.
//   - checkpoint.go: keys, signing and opening checkpoints, the
//     checkpoints file (JSON lines of StoredCheckpoint), the errors callers
//     branch on (ErrMalformed, ErrSignature, ErrOrigin, ErrProof).
//   - proof.go: inclusion and consistency checks, the voter's Receipt,
//     and the strict reading of a receipt, a vote's status and a
//     consistency proof.
//   - tree.go: Tree, a poll's log in memory: roots at any size and proofs.
//   - verify.go: Verify, the audit of an export against checkpoints,
//     published results, eligible lists and the polls named as from
//     before definitions, and its Report; its stages:
//   - verify_rows.go: the export's rows and definitions (ExportRow) read
//     into each poll's tree, and what one line can show checked (a log
//     that begins with a vote, unless its poll is from before
//     definitions), each vote against the definition in force;
//   - verify_eligible.go: the eligible lists given (ReadEligible) checked
//     against the definitions, and the votes against them;
//   - verify_checkpoints.go: each stored checkpoint opened
//     (OpenPollCheckpoint) and compared with its poll's tree;
//   - recount.go: which votes count (a principal's first, or in a poll
//     of latest answers its last) and what each adds to its poll's
//     figures, for every ballot kind: the audit's own fold, an
//     independent twin of vote's Count, so that the audit does not share
//     the mistakes of what it checks;
//   - verify_results.go: published results read (ReadResults) and
//     compared with the recount, figure by figure.
package audit
