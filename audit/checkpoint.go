package audit

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/transparency-dev/formats/log"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"tally/vote"
)

// This file owns checkpoints: a poll's tree head (origin, size, root) in
// the transparency-log checkpoint format, signed as a note with the log's
// Ed25519 key, and the JSON-lines file that carries a deployment's stored
// checkpoints to an auditor.

// Errors a caller can branch on; each error this package returns about a
// checkpoint or a proof wraps one of them and says what did not hold.
var (
	// ErrMalformed: a checkpoint, key or proof is not in its format.
	ErrMalformed = errors.New("malformed")
	// ErrSignature: a checkpoint is not signed by the key given, or its
	// signature does not verify (the text was changed after signing).
	ErrSignature = errors.New("signature does not verify")
	// ErrOrigin: a checkpoint is signed by the right key but for another
	// log or poll than the one asked about.
	ErrOrigin = errors.New("wrong origin")
	// ErrProof: a proof does not lead from the leaf or older tree to the
	// root it is checked against.
	ErrProof = errors.New("proof does not verify")
)

// Origin is the first line of every checkpoint of a poll: the log's name
// (the name of its signing key, which names the deployment) and the poll.
// A checkpoint of one poll therefore never verifies as another poll's.
func Origin(logName, pollID string) string { return logName + "/polls/" + pollID }

// GenerateKey makes a new Ed25519 signing key for the log called name and
// returns it with its verifier key, both in the golang.org/x/mod/sumdb/note
// text form ("PRIVATE+KEY+name+hash+key" and "name+hash+key"). The signer
// key is a secret; the verifier key is published for auditors and voters.
func GenerateKey(name string) (signerKey, verifierKey string, err error) {
	if err := checkLogName(name); err != nil {
		return "", "", err
	}
	return note.GenerateKey(rand.Reader, name)
}

// checkLogName refuses a name note cannot sign with or that would not read
// as the first part of an origin line.
func checkLogName(name string) error {
	if name == "" || !utf8.ValidString(name) || strings.ContainsRune(name, '+') ||
		strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0 {
		return fmt.Errorf("log name %q: use printable characters without spaces or '+', such as tally.example.org", name)
	}
	return nil
}

// NewSigner reads a signer key GenerateKey wrote (surrounding whitespace,
// such as a file's final newline, is ignored).
func NewSigner(signerKey string) (note.Signer, error) {
	s, err := note.NewSigner(strings.TrimSpace(signerKey))
	if err != nil {
		return nil, fmt.Errorf("%w signer key: %v (a signer key reads PRIVATE+KEY+name+hash+key; tally log key generate writes one)", ErrMalformed, err)
	}
	return s, nil
}

// NewVerifier reads a verifier key as GenerateKey printed it (surrounding
// whitespace is ignored).
func NewVerifier(verifierKey string) (note.Verifier, error) {
	k := strings.TrimSpace(verifierKey)
	if strings.HasPrefix(k, "PRIVATE+KEY+") {
		return nil, fmt.Errorf("%w verifier key: this is a signer key, which must stay secret; give the verifier key tally log key generate printed", ErrMalformed)
	}
	v, err := note.NewVerifier(k)
	if err != nil {
		return nil, fmt.Errorf("%w verifier key %q: %v (a verifier key reads name+hash+key)", ErrMalformed, k, err)
	}
	return v, nil
}

// Checkpoint is a signed tree head that OpenCheckpoint verified.
type Checkpoint struct {
	Origin string    // Origin(logName, pollID)
	Size   int64     // leaves in the tree
	Root   tlog.Hash // RFC 6962 root of the first Size leaves
	Note   []byte    // the signed note, as it was given
}

// PollID is the poll of c's origin: poll ids have no '/', so it is what
// follows the origin's last '/'. Two checkpoints of one poll signed under
// different log names (after a key rotation) share it.
func (c Checkpoint) PollID() string { return c.Origin[strings.LastIndexByte(c.Origin, '/')+1:] }

// SignCheckpoint signs the tree head (origin, size, root) with signer and
// returns the signed note: the checkpoint text, a blank line, and one
// signature line.
func SignCheckpoint(signer note.Signer, origin string, size int64, root tlog.Hash) ([]byte, error) {
	if origin == "" || !utf8.ValidString(origin) || strings.IndexFunc(origin, unicode.IsControl) >= 0 {
		return nil, fmt.Errorf("sign checkpoint: origin %q must be one line of printable text", origin)
	}
	if size < 0 {
		return nil, fmt.Errorf("sign checkpoint: size %d is negative", size)
	}
	text := log.Checkpoint{Origin: origin, Size: uint64(size), Hash: root[:]}.Marshal()
	msg, err := note.Sign(&note.Note{Text: string(text)}, signer)
	if err != nil {
		return nil, fmt.Errorf("sign checkpoint of %s: %w", origin, err)
	}
	return msg, nil
}

// OpenCheckpoint verifies msg, a signed checkpoint, against verifier and
// returns its tree head. It refuses a note verifier did not sign or whose
// signature does not verify (ErrSignature), a text that is not exactly a
// checkpoint as SignCheckpoint writes it (ErrMalformed: no extension
// lines, a 32-byte root, a size in canonical decimal), and an origin other
// than wantOrigin (ErrOrigin). Signatures by other keys (witnesses'
// cosignatures) are allowed and not checked.
func OpenCheckpoint(msg []byte, verifier note.Verifier, wantOrigin string) (Checkpoint, error) {
	n, err := note.Open(msg, note.VerifierList(verifier))
	if err != nil {
		return Checkpoint{}, openError(err, verifier)
	}
	for _, sig := range n.Sigs { // one text, one signature: no other spelling of it verifies
		if _, err := base64.StdEncoding.Strict().DecodeString(sig.Base64); err != nil {
			return Checkpoint{}, fmt.Errorf("%w checkpoint: the signature of key %s is not in canonical base64", ErrMalformed, keyName(verifier))
		}
	}
	var c log.Checkpoint
	rest, err := c.Unmarshal([]byte(n.Text))
	switch {
	case err != nil:
		return Checkpoint{}, fmt.Errorf("%w checkpoint: %v", ErrMalformed, err)
	case len(rest) > 0:
		return Checkpoint{}, fmt.Errorf("%w checkpoint: %d bytes follow the root line; tally's checkpoints have no extension lines", ErrMalformed, len(rest))
	case len(c.Hash) != tlog.HashSize:
		return Checkpoint{}, fmt.Errorf("%w checkpoint: the root hash has %d bytes, not %d", ErrMalformed, len(c.Hash), tlog.HashSize)
	case c.Size > math.MaxInt64:
		return Checkpoint{}, fmt.Errorf("%w checkpoint: size %d is too large", ErrMalformed, c.Size)
	case !bytes.Equal(c.Marshal(), []byte(n.Text)):
		return Checkpoint{}, fmt.Errorf("%w checkpoint: the text is not in canonical form (size without leading zeros, padded base64 root)", ErrMalformed)
	case c.Origin != wantOrigin:
		return Checkpoint{}, fmt.Errorf("%w: the checkpoint is of %q, not %q", ErrOrigin, c.Origin, wantOrigin)
	}
	out := Checkpoint{Origin: c.Origin, Size: int64(c.Size), Note: msg}
	copy(out.Root[:], c.Hash)
	return out, nil
}

// openError says why note.Open refused a checkpoint.
func openError(err error, v note.Verifier) error {
	var unverified *note.UnverifiedNoteError
	var invalid *note.InvalidSignatureError
	switch {
	case errors.As(err, &unverified):
		var by []string
		for _, s := range unverified.Note.UnverifiedSigs {
			by = append(by, fmt.Sprintf("%s+%08x", s.Name, s.Hash))
		}
		return &unsignedError{key: keyName(v), by: strings.Join(by, ", ")}
	case errors.As(err, &invalid):
		return fmt.Errorf("%w: the signature by key %s does not match the checkpoint's text, which was changed after signing or never signed by that key", ErrSignature, keyName(v))
	default:
		return fmt.Errorf("%w checkpoint: not a signed note (%v): a checkpoint is its text, a blank line and signature lines", ErrMalformed, err)
	}
}

// keyName names a verifier key as a note's signature line does.
func keyName(v note.Verifier) string { return fmt.Sprintf("%s+%08x", v.Name(), v.KeyHash()) }

// unsignedError is ErrSignature for a note that carries no signature by
// the key asked about, so that a caller holding several keys can try the
// next one.
type unsignedError struct{ key, by string }

func (e *unsignedError) Error() string {
	return fmt.Sprintf("%v: the checkpoint is not signed by key %s (it is signed by %s)", ErrSignature, e.key, e.by)
}

func (e *unsignedError) Is(target error) bool { return target == ErrSignature }

// StoredCheckpoint is one line of a checkpoints file: a poll's signed
// checkpoint as the deployment stored it, with the size it claims (the
// size is repeated outside the note so that a reader can sort and select
// without opening it; the audit checks that the two agree).
type StoredCheckpoint struct {
	PollID     string `json:"poll_id"`
	Size       int64  `json:"size"`
	Checkpoint string `json:"checkpoint"` // the signed note text
}

// WriteCheckpoint writes c as one line of a checkpoints file.
func WriteCheckpoint(w io.Writer, c StoredCheckpoint) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// ReadCheckpoints reads a checkpoints file: JSON lines (EachLine), each a
// StoredCheckpoint whose keys are exactly poll_id, size and checkpoint,
// spelt so, each once and none null, and no other. It checks each line's
// form, not its signature (the audit does that, naming the line). An
// error names the line and what is wrong with it.
func ReadCheckpoints(r io.Reader) ([]StoredCheckpoint, error) {
	checkpointKeys := []string{"poll_id", "size", "checkpoint"}
	var out []StoredCheckpoint
	err := EachLine(r, "checkpoints", func(line []byte, n int) error {
		keys, err := checkKeys(line, checkpointKeys)
		if err != nil {
			return fmt.Errorf("checkpoints line %d: %v", n, err)
		}
		for k, v := range keys {
			if !slices.Contains(checkpointKeys, k) {
				return fmt.Errorf("checkpoints line %d: unknown key %q; a line is {\"poll_id\", \"size\", \"checkpoint\"} and nothing else", n, k)
			}
			if string(v) == "null" {
				return fmt.Errorf("checkpoints line %d: %s is null; give it", n, k)
			}
		}
		for _, k := range checkpointKeys {
			if _, ok := keys[k]; !ok && keys != nil {
				return fmt.Errorf("checkpoints line %d: %s is missing; a line is {\"poll_id\", \"size\", \"checkpoint\"}", n, k)
			}
		}
		var c StoredCheckpoint
		if err := json.Unmarshal(line, &c); err != nil {
			return fmt.Errorf("checkpoints line %d: %v; each line is {\"poll_id\", \"size\", \"checkpoint\"}", n, err)
		}
		switch {
		case !vote.ValidID(c.PollID):
			return fmt.Errorf("checkpoints line %d: poll_id %q is invalid: ids are "+vote.IDRule, n, c.PollID)
		case c.Size < 0:
			return fmt.Errorf("checkpoints line %d: size %d is negative", n, c.Size)
		case c.Checkpoint == "":
			return fmt.Errorf("checkpoints line %d: checkpoint is missing", n)
		}
		out = append(out, c)
		return nil
	})
	return out, err
}
