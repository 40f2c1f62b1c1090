package cli

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"tally/audit"
	"tally/ledger"
	"tally/vote"
)

// This file owns the generator of the conformance vectors in
// testdata/conformance: an honest ledger of three polls made from a fixed
// key, fixed rows and fixed times (so every file is the same byte for
// byte on every run), the files tally would publish for it, and each
// tampered case with the verdict it must get. The expected verdicts are
// written here by hand, never taken from the verifier's output.

// vectorLog names the vectors' log: the first part of every checkpoint's
// origin and of the verifier key.
const vectorLog = "conformance.tally.example"

// The Ed25519 seed of each key is SHA-256 of its text, so that anyone can
// rebuild the signer key of the vectors (it signs nothing else).
const (
	vectorKeySeed      = "tally conformance vectors: log key"
	vectorOtherKeySeed = "tally conformance vectors: another key"
)

// The base files, in testdata/conformance.
const (
	vectorExport           = "export.jsonl"
	vectorCheckpoints      = "checkpoints.jsonl"
	vectorKey              = "verifier.key"
	vectorResults          = "results.jsonl"
	vectorReceiptLunch     = "receipt-lunch-4.json"
	vectorReceiptDinner    = "receipt-dinner-5.json"
	vectorLaterLunch       = "checkpoint-lunch-10.txt"
	vectorConsistencyLunch = "consistency-lunch-7-10.json"
	vectorManifestFile     = "vectors.json"
)

// vectorVote is one vote of the honest ledger.
type vectorVote struct {
	seq                  int64
	principal, candidate string
}

// vectorBatches are the honest ledger's leaf appends, in the order they
// were written, which is the export's order: each poll's rows in leaf
// order, the polls interleaved. Seqs are drawn when a vote is received,
// so two appends can commit in the other order than their seqs: dinner's
// 8-9 after lunch's 10-11, and lunch's 12-13 (leaves 7-8) after its 14-15
// (leaves 5-6). A verifier must follow leaf order, not seq order.
var vectorBatches = []struct {
	poll  string
	votes []vectorVote
}{
	{"lunch", []vectorVote{{1, "alice", "soup"}, {2, "bob", "salad"}, {3, "carol", "soup"}}},
	{"dinner", []vectorVote{{4, "bob", "fish"}, {5, "alice", "pasta"}}},
	{"board", []vectorVote{{6, "carol", "yes"}, {7, "dave", "no"}}},
	{"lunch", []vectorVote{{10, "dave", "stew"}, {11, "erin", "salad"}}},
	{"dinner", []vectorVote{{8, "carol", "fish"}, {9, "erin", "fish"}}},
	{"lunch", []vectorVote{{14, "frank", "soup"}, {15, "grace", "stew"}}},
	{"lunch", []vectorVote{{12, "heidi", "salad"}, {13, "ivan", "stew"}}},
	{"board", []vectorVote{{16, "alice", "yes"}, {17, "erin", "yes"}}},
	{"dinner", []vectorVote{{18, "dave", "pasta"}, {19, "frank", "fish"}}},
	{"lunch", []vectorVote{{20, "judy", "soup"}}},
	{"board", []vectorVote{{21, "bob", "no"}, {22, "frank", "abstain"}}},
	{"dinner", []vectorVote{{23, "grace", "pasta"}, {24, "heidi", "fish"}}},
}

// vectorLegacyPolls are the first ledger's polls, all from before
// definitions were logged: tally audit verify is told so
// (--before-definitions), or it finds each log's missing definition.
var vectorLegacyPolls = []string{"board", "dinner", "lunch"}

// vectorCheckpointSizes are the sizes signed of each poll; the last is
// the poll's full size.
var vectorCheckpointSizes = map[string][]int64{"board": {2, 6}, "dinner": {2, 4, 8}, "lunch": {3, 7, 10}}

// vectorEpoch is when the polls opened; vectorAsOf, when the results
// were read.
var (
	vectorEpoch = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	vectorAsOf  = time.Date(2026, 3, 1, 9, 30, 0, 0, time.UTC)
)

// vectorReceivedAt is when intake received the vote of seq: 41 s apart,
// with microseconds that are never zero, so a verifier that drops them
// computes other leaves.
func vectorReceivedAt(seq int64) time.Time {
	return vectorEpoch.Add(time.Duration(seq)*41*time.Second + time.Duration(seq*390151%1_000_000)*time.Microsecond)
}

// vectorEventID is the event id the principal's client gave its vote in
// poll, shaped like the UUIDs clients send.
func vectorEventID(principal, poll string) string {
	h := sha256.Sum256([]byte(principal + "/" + poll))
	s := hex.EncodeToString(h[:16])
	return s[:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:]
}

// vectorRows are the honest ledger's rows in export order, as tally
// export writes them: the rows of one append share its recorded_at.
func vectorRows() []audit.ExportRow {
	next := map[string]int64{}
	var rows []audit.ExportRow
	for _, b := range vectorBatches {
		var last time.Time
		for _, v := range b.votes {
			if at := vectorReceivedAt(v.seq); at.After(last) {
				last = at
			}
		}
		recorded := last.Add(120 * time.Millisecond)
		for _, v := range b.votes {
			rows = append(rows, audit.ExportRow{Seq: v.seq, EventID: vectorEventID(v.principal, b.poll), PollID: b.poll,
				CandidateID: v.candidate, PrincipalID: v.principal, ReceivedAt: vectorReceivedAt(v.seq), RecordedAt: recorded,
				LeafIndex: ptr(next[b.poll])})
			next[b.poll]++
		}
	}
	return rows
}

func ptr[T any](v T) *T { return &v }

// vectorKeyPair makes the signer and the verifier key text of the Ed25519
// key whose seed is SHA-256 of seedText, in note's text forms (what
// note.GenerateKey writes, from a fixed seed rather than a random one).
func vectorKeyPair(t *testing.T, seedText string) (note.Signer, string) {
	t.Helper()
	seed := sha256.Sum256([]byte(seedText))
	pub := ed25519.NewKeyFromSeed(seed[:]).Public().(ed25519.PublicKey)
	vkey, err := note.NewEd25519VerifierKey(vectorLog, pub)
	if err != nil {
		t.Fatal(err)
	}
	hash := strings.Split(vkey, "+")[1] // name+hash+key; the name has no '+'
	skey := "PRIVATE+KEY+" + vectorLog + "+" + hash + "+" + base64.StdEncoding.EncodeToString(append([]byte{1}, seed[:]...))
	// note.GenerateKey, reading the seed as its randomness, writes the
	// same: these are the texts tally log key generate writes.
	if s, v, err := note.GenerateKey(bytes.NewReader(seed[:]), vectorLog); err != nil || s != skey || v != vkey {
		t.Fatalf("the key texts built from the seed are not those note.GenerateKey writes from it (%v)", err)
	}
	signer, err := audit.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	return signer, vkey
}

// vectorLedger is a ledger's rows with the trees they make and the
// checkpoints signed of them.
type vectorLedger struct {
	rows        []audit.ExportRow
	trees       map[string]*audit.Tree
	checkpoints []audit.StoredCheckpoint // by poll, then size, as tally export writes them
}

func (l vectorLedger) export() []byte {
	var b []byte
	for _, r := range l.rows {
		b = audit.AppendExportLine(b, r)
	}
	return b
}

func (l vectorLedger) checkpointsFile() []byte { return checkpointLines(l.checkpoints) }

func checkpointLines(cps []audit.StoredCheckpoint) []byte {
	var b bytes.Buffer
	for _, c := range cps {
		audit.WriteCheckpoint(&b, c)
	}
	return b.Bytes()
}

// note is the signed checkpoint of poll at size.
func (l vectorLedger) note(t *testing.T, poll string, size int64) string {
	for _, c := range l.checkpoints {
		if c.PollID == poll && c.Size == size {
			return c.Checkpoint
		}
	}
	t.Fatalf("no checkpoint of %s at size %d", poll, size)
	return ""
}

// results are the published results of every poll at its full size, as
// GET /v1/polls/{poll_id}/results answers them, in order of poll id.
func (l vectorLedger) results() []ledger.Results {
	var out []ledger.Results
	for _, poll := range slices.Sorted(maps.Keys(l.trees)) {
		counts := map[string]int64{}
		for _, r := range l.rows {
			if r.PollID == poll && r.Definition == nil {
				counts[r.CandidateID]++
			}
		}
		res := ledger.Results{PollID: poll, Kind: vote.KindSingle, TreeSize: l.trees[poll].Size(), AsOf: vectorAsOf}
		for _, c := range slices.Sorted(maps.Keys(counts)) {
			res.Results = append(res.Results, ledger.CandidateVotes{CandidateID: c, Votes: counts[c]})
			res.Total += counts[c]
		}
		res.Ballots = res.Total // single choice: one vote a ballot
		out = append(out, res)
	}
	return out
}

func resultLines(t *testing.T, res []ledger.Results) []byte {
	var b []byte
	for _, r := range res {
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b = append(append(b, line...), '\n')
	}
	return b
}

// vectorGen builds the vectors: the files by path (relative to
// testdata/conformance) and the manifest's cases.
type vectorGen struct {
	t        *testing.T
	signer   note.Signer
	key      string // the verifier key text
	otherKey string // a key of the same name that signed nothing here
	honest   vectorLedger
	files    map[string][]byte
	cases    []vectorCase
	base     vectorBase // the files verify's cases start from; zero: export.jsonl and its own
	// before are the polls a verify case of the first ledger names as
	// from before definitions: all of them, unless a case says otherwise.
	before []string
}

// vectorBase names the export, checkpoints and results files a verify
// case starts from.
type vectorBase struct{ export, checkpoints, results string }

// conformanceVectors generates every file of testdata/conformance but
// its README.
func conformanceVectors(t *testing.T) map[string][]byte {
	t.Helper()
	g := &vectorGen{t: t, files: map[string][]byte{}}
	g.signer, g.key = vectorKeyPair(t, vectorKeySeed)
	_, g.otherKey = vectorKeyPair(t, vectorOtherKeySeed)
	g.honest = g.ledger(vectorRows())
	g.before = vectorLegacyPolls
	g.baseFiles()
	g.exportCases()
	g.checkpointCases()
	g.resultsCases()
	g.receiptCases()
	g.definedCases()
	m, err := json.MarshalIndent(vectorManifest{
		About: "Conformance vectors of tally audit verify and tally audit receipt; testdata/conformance/README.md says how to run them.",
		Log:   vectorLog, KeySeed: vectorKeySeed, Cases: g.cases}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	g.files[vectorManifestFile] = append(oneLineEach.ReplaceAllFunc(m, compactJSON), '\n')
	return g.files
}

// oneLineEach matches, in the indented manifest, a discrepancy and a list
// of fields, which read best on one line each.
var oneLineEach = regexp.MustCompile(`\{\s*"poll_id"[^{}]*(\{[^{}]*\}[^{}]*)?\}|\[\s*("[a-z_]+"\s*,?\s*)*\]`)

func compactJSON(b []byte) []byte {
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		panic(err) // a match of oneLineEach in valid JSON is valid JSON
	}
	return out.Bytes()
}

// ledger builds the trees of rows and signs each poll's checkpoints with
// the vectors' key: what an operator holding the key would publish for
// those rows.
func (g *vectorGen) ledger(rows []audit.ExportRow) vectorLedger {
	return g.ledgerSigned(rows, vectorCheckpointSizes)
}

// ledgerSigned is ledger with the checkpoint sizes of each poll given.
func (g *vectorGen) ledgerSigned(rows []audit.ExportRow, sizes map[string][]int64) vectorLedger {
	l := vectorLedger{rows: rows, trees: map[string]*audit.Tree{}}
	for _, r := range rows {
		if l.trees[r.PollID] == nil {
			l.trees[r.PollID] = &audit.Tree{}
		}
		h, err := audit.LeafHash(r.Leaf())
		if r.Definition != nil {
			h, err = audit.DefinitionHash(*r.Definition)
		}
		if err == nil {
			err = l.trees[r.PollID].Append(h)
		}
		if err != nil {
			g.t.Fatal(err)
		}
	}
	for _, poll := range slices.Sorted(maps.Keys(sizes)) {
		for _, size := range sizes[poll] {
			root, err := l.trees[poll].Root(size)
			if err != nil {
				g.t.Fatal(err)
			}
			msg, err := audit.SignCheckpoint(g.signer, audit.Origin(vectorLog, poll), size, root)
			if err != nil {
				g.t.Fatal(err)
			}
			l.checkpoints = append(l.checkpoints, audit.StoredCheckpoint{PollID: poll, Size: size, Checkpoint: string(msg)})
		}
	}
	return l
}

// baseFiles are the honest case: what tally publishes and a voter keeps.
func (g *vectorGen) baseFiles() {
	h := g.honest
	g.files[vectorExport] = h.export()
	g.files[vectorCheckpoints] = h.checkpointsFile()
	g.files[vectorKey] = []byte(g.key + "\n")
	g.files[vectorResults] = resultLines(g.t, h.results())
	g.files[vectorReceiptLunch] = g.receiptJSON(g.receiptOf("lunch", 4, 7))
	g.files[vectorReceiptDinner] = g.receiptJSON(g.receiptOf("dinner", 5, 8))
	g.files[vectorLaterLunch] = []byte(h.note(g.t, "lunch", 10))
	g.files[vectorConsistencyLunch] = g.consistencyJSON("lunch", 7, 10, nil)
	g.verify("honest", "the export, checkpoints and results as tally publishes them", nil, ExitOK, nil)
}

// The export's lines, for reference (leaf L of poll P is P[L]):
//
//	1-3 lunch[0-2]   4-5 dinner[0-1]   6-7 board[0-1]    8-9 lunch[3-4]
//	10-11 dinner[2-3]  12-13 lunch[5-6]  14-15 lunch[7-8]  16-17 board[2-3]
//	18-19 dinner[4-5]  20 lunch[9]  21-22 board[4-5]  23-24 dinner[6-7]
//
// and of the checkpoints file: 1-2 board 2, 6; 3-5 dinner 2, 4, 8;
// 6-8 lunch 3, 7, 10. Results: 1 board, 2 dinner, 3 lunch.

// exportCases are the export's tamperings.
func (g *vectorGen) exportCases() {
	export := string(g.files[vectorExport])
	over := func(b string) map[string][]byte { return map[string][]byte{vectorExport: []byte(b)} }
	lines := strings.SplitAfter(export, "\n")
	lines = lines[:len(lines)-1] // the empty string after the last newline

	g.verify("export-candidate-changed", "lunch leaf 4 (line 9): erin's salad made soup; two checkpoints and the results disagree",
		over(g.editLine(export, 9, `"candidate_id":"salad"`, `"candidate_id":"soup"`)), ExitCheck, []vectorDiscrepancy{
			rootDiffers("lunch", 3, 6, 7), rootDiffers("lunch", 3, 9, 8), resultsField("lunch", "votes"), resultsField("lunch", "votes")})

	swapped := g.editLine(export, 12, `"candidate_id":"soup"`, `"candidate_id":"stew"`)
	swapped = g.editLine(swapped, 15, `"candidate_id":"stew"`, `"candidate_id":"soup"`)
	g.verify("export-candidates-swapped", "the candidates of lunch leaves 5 and 8 (lines 12, 15) swapped: the tallies hold, only the checkpoints see it",
		over(swapped), ExitCheck, []vectorDiscrepancy{rootDiffers("lunch", 3, 6, 7), rootDiffers("lunch", 3, 9, 8)})

	g.verify("export-principal-changed", "lunch leaf 2 (line 3): principal carol made oscar, who did not vote",
		over(g.editLine(export, 3, `"principal_id":"carol"`, `"principal_id":"oscar"`)), ExitCheck, []vectorDiscrepancy{
			rootDiffers("lunch", 0, 2, 6), rootDiffers("lunch", 0, 6, 7), rootDiffers("lunch", 0, 9, 8)})

	d3 := g.honest.rows[10].ReceivedAt
	g.verify("export-received-at-changed", "dinner leaf 3 (line 11): received_at one microsecond later",
		over(g.editLine(export, 11, d3.Format(audit.TimeFormat), d3.Add(time.Microsecond).Format(audit.TimeFormat))), ExitCheck,
		[]vectorDiscrepancy{rootDiffers("dinner", 2, 3, 4), rootDiffers("dinner", 2, 7, 5)})

	g.verify("export-line-deleted", "lunch leaf 5 (line 12) deleted: the later rows' leaf_index, two checkpoints and the results' tree_size disagree",
		over(strings.Join(slices.Delete(slices.Clone(lines), 11, 12), "")), ExitCheck, []vectorDiscrepancy{
			rowField("lunch", 5, "leaf_index", 12), rowField("lunch", 6, "leaf_index", 13), rowField("lunch", 7, "leaf_index", 14),
			rowField("lunch", 8, "leaf_index", 19), rootDiffers("lunch", 3, 6, 7), rootDiffers("lunch", 9, 9, 8), resultsField("lunch", "tree_size")})

	g.verify("export-line-inserted", "a vote of oscar for stew inserted as lunch leaf 5 (line 10), the later leaf_index renumbered: "+
		"the checkpoints and the count of the first 10 leaves disagree",
		over(string(g.inserted())), ExitCheck, []vectorDiscrepancy{
			rootDiffers("lunch", 3, 6, 7), rootDiffers("lunch", 3, 9, 8), resultsField("lunch", "votes"), resultsField("lunch", "votes")})

	g.verify("export-line-duplicated", "lunch leaf 9 (line 20) written twice: the copy (line 21) repeats its seq, leaf_index, event and principal",
		over(strings.Join(slices.Insert(slices.Clone(lines), 20, lines[19]), "")), ExitCheck, []vectorDiscrepancy{
			rowField("lunch", 10, "seq", 21), rowField("lunch", 10, "leaf_index", 21), rowField("lunch", 10, "event_id", 21),
			rowField("lunch", 10, "principal_id", 21)})

	reordered := slices.Clone(lines)
	reordered[13], reordered[14] = reordered[14], reordered[13]
	g.verify("export-lines-reordered", "lunch leaves 7 and 8 (lines 14, 15) swapped, each line unchanged",
		over(strings.Join(reordered, "")), ExitCheck, []vectorDiscrepancy{
			rowField("lunch", 7, "leaf_index", 14), rowField("lunch", 8, "leaf_index", 15), rootDiffers("lunch", 7, 9, 8)})

	g.verify("export-polls-one-after-another", "the same rows, each poll's whole (lunch, dinner, board) rather than interleaved: "+
		"only each poll's own order matters", over(string(g.onePollAfterAnother())), ExitOK, nil)

	g.verify("export-truncated", "the file cut in the middle of its last line",
		over(export[:len(export)-len(lines[23])/2]), ExitError, nil, "export line 24: malformed JSON")

	g.verify("export-key-case", `line 9 carries "Candidate_ID" beside "candidate_id": a case-blind reader could count either`,
		over(g.editLine(export, 9, `"candidate_id":"salad"`, `"candidate_id":"salad","Candidate_ID":"soup"`)), ExitError, nil,
		"export line 9", `unknown field "Candidate_ID"`)

	g.verify("export-duplicate-key", `line 9 gives "candidate_id" twice, salad then soup`,
		over(g.editLine(export, 9, `"candidate_id":"salad"`, `"candidate_id":"salad","candidate_id":"soup"`)), ExitError, nil,
		"export line 9", `field "candidate_id" is given twice`)

	l4 := g.honest.rows[8].ReceivedAt.Format(audit.TimeFormat)
	g.verify("export-received-at-7-digits", "line 9's received_at with a seventh fractional digit, 0: the same instant, refused all the same",
		over(g.editLine(export, 9, l4, strings.TrimSuffix(l4, "Z")+"0Z")), ExitError, nil,
		"export line 9", "with 7 fractional digits")

	spaced := slices.Clone(lines)
	for i := range spaced {
		spaced[i] = " \t" + strings.TrimSuffix(spaced[i], "\n") + "\t \r\n"
	}
	g.verify("export-lines-spaced-crlf", "every line with a space and a tab before it, and a tab, a space and a carriage return before its newline: "+
		"the white space a line may have around it", over(strings.Join(spaced, "")), ExitOK, nil)

	g.verify("export-line-no-break-space", "line 9 begins with a no-break space (U+00A0): white space other than space, tab and CR is refused",
		over(g.editLine(export, 9, "{", "\u00a0{")), ExitError, nil, "export line 9 begins with U+00A0")

	g.verify("export-line-1MiB", "line 9 padded with spaces inside its object to 1 MiB exactly, its newline not counted: the longest line read",
		over(g.editLine(export, 9, "{", "{"+strings.Repeat(" ", audit.MaxLine-len(lines[8])+1))), ExitOK, nil)

	g.verify("export-line-1MiB-and-1", "line 9 padded to 1 MiB and one byte, its newline not counted: refused",
		over(g.editLine(export, 9, "{", "{"+strings.Repeat(" ", audit.MaxLine-len(lines[8])+2))), ExitError, nil,
		"export line 9 is longer than 1048576 bytes")

	g.verify("export-received-at-zero-time", "line 9's received_at is 0001-01-01T00:00:00Z, the time Go and others read as no time at all: "+
		"refused, as every time before 1970",
		over(g.editLine(export, 9, l4, "0001-01-01T00:00:00.000000Z")), ExitError, nil, "export line 9", "before 1970-01-01T00:00:00Z")

	g.verify("export-received-at-1969", "line 9's received_at is 1969-12-31T23:59:59.999999Z, a microsecond before 1970: refused",
		over(g.editLine(export, 9, l4, "1969-12-31T23:59:59.999999Z")), ExitError, nil, "export line 9", "before 1970-01-01T00:00:00Z")

	g.verify("export-received-at-1970-by-offset", "line 9's received_at is 1970-01-01T00:30:00+01:00, which is 1969 in UTC: "+
		"the instant counts, not how it is written",
		over(g.editLine(export, 9, l4, "1970-01-01T00:30:00+01:00")), ExitError, nil, "export line 9", "before 1970-01-01T00:00:00Z")

	// The operator, who holds the key, signed these: only the row checks
	// see them.
	rows := slices.Clone(g.honest.rows)
	rows[4].EventID = rows[0].EventID
	reused := g.ledger(rows)
	g.verify("event-id-reused-across-polls", "alice's dinner vote (line 5) carries the event id of her lunch vote (line 1), "+
		"checkpoints signed over it",
		map[string][]byte{vectorExport: reused.export(), vectorCheckpoints: reused.checkpointsFile()}, ExitCheck,
		[]vectorDiscrepancy{rowField("dinner", 1, "event_id", 5)})

	rows = slices.Clone(g.honest.rows)
	rows[10].PrincipalID, rows[10].EventID = "bob", vectorEventID("bob", "dinner-again")
	twice := g.ledger(rows)
	g.verify("principal-voted-twice", "dinner leaf 3 (line 11) made a second vote of bob (leaf 0), checkpoints signed over it",
		map[string][]byte{vectorExport: twice.export(), vectorCheckpoints: twice.checkpointsFile()}, ExitCheck,
		[]vectorDiscrepancy{rowField("dinner", 3, "principal_id", 11)})
}

// inserted is the export with oscar's vote for stew inserted as lunch
// leaf 5, after line 9, with a new seq, and the later lunch rows'
// leaf_index renumbered, as a careful forger would.
func (g *vectorGen) inserted() []byte {
	var rows []audit.ExportRow
	for i, r := range g.honest.rows {
		if r.PollID == "lunch" && *r.LeafIndex >= 5 {
			r.LeafIndex = ptr(*r.LeafIndex + 1)
		}
		rows = append(rows, r)
		if i == 8 {
			rows = append(rows, audit.ExportRow{Seq: 25, EventID: vectorEventID("oscar", "lunch"), PollID: "lunch", CandidateID: "stew",
				PrincipalID: "oscar", ReceivedAt: r.ReceivedAt.Add(7 * time.Second), RecordedAt: r.RecordedAt, LeafIndex: ptr(int64(5))})
		}
	}
	return vectorLedger{rows: rows}.export()
}

// onePollAfterAnother is the honest export with each poll's rows
// together, the polls in order of first appearance.
func (g *vectorGen) onePollAfterAnother() []byte {
	var rows []audit.ExportRow
	for _, poll := range []string{"lunch", "dinner", "board"} {
		for _, r := range g.honest.rows {
			if r.PollID == poll {
				rows = append(rows, r)
			}
		}
	}
	return vectorLedger{rows: rows}.export()
}

// checkpointCases are the checkpoints' tamperings and a wrong key.
func (g *vectorGen) checkpointCases() {
	over := func(cps []audit.StoredCheckpoint) map[string][]byte {
		return map[string][]byte{vectorCheckpoints: checkpointLines(cps)}
	}
	cps := slices.Clone(g.honest.checkpoints)
	cps[7].Checkpoint = g.flipSignatureByte(cps[7].Checkpoint)
	g.verify("checkpoint-signature-byte", "one byte of the signature of lunch's checkpoint of size 10 (checkpoints line 8) changed",
		over(cps), ExitCheck, []vectorDiscrepancy{checkpointField("lunch", "checkpoint", 8)})

	cps = slices.Clone(g.honest.checkpoints)
	cps[4].Checkpoint = g.flipRootByte(cps[4].Checkpoint)
	g.verify("checkpoint-root-byte", "one byte of the root of dinner's checkpoint of size 8 (checkpoints line 5) changed, its signature kept",
		over(cps), ExitCheck, []vectorDiscrepancy{checkpointField("dinner", "checkpoint", 5)})

	cps = slices.Clone(g.honest.checkpoints)
	cps[1].Size = 5
	g.verify("checkpoint-size-mismatch", `board's checkpoint of size 6 (checkpoints line 2) stored with "size": 5`,
		over(cps), ExitCheck, []vectorDiscrepancy{checkpointField("board", "size", 2)})

	var supper audit.Tree
	for _, r := range g.honest.rows[:2] {
		r.PollID = "supper"
		if err := supper.AppendLeaf(r.Leaf()); err != nil {
			g.t.Fatal(err)
		}
	}
	supperRoot, err := supper.Root(2)
	if err != nil {
		g.t.Fatal(err)
	}
	supperNote, err := audit.SignCheckpoint(g.signer, audit.Origin(vectorLog, "supper"), 2, supperRoot)
	if err != nil {
		g.t.Fatal(err)
	}
	g.verify("checkpoint-poll-not-in-export", "a signed checkpoint of 2 leaves of poll supper (checkpoints line 9), which the export does not hold: "+
		"its leaves 0 to 1 are missing from the export",
		over(append(slices.Clone(g.honest.checkpoints), audit.StoredCheckpoint{PollID: "supper", Size: 2, Checkpoint: string(supperNote)})),
		ExitCheck, []vectorDiscrepancy{rootDiffers("supper", 0, 1, 9)})

	cpText := string(g.files[vectorCheckpoints])
	g.verify("checkpoints-key-case", `checkpoints line 2 carries "Size":5 beside "size":6: keys are spelt exactly, as in the export`,
		map[string][]byte{vectorCheckpoints: []byte(g.editLine(cpText, 2, `"size":6,`, `"size":6,"Size":5,`))}, ExitError, nil,
		"checkpoints line 2", `key "size" is spelt "Size"`)

	g.verify("checkpoints-unknown-key", `checkpoints line 2 carries "witness":"w1", a key the file does not have: refused, not skipped`,
		map[string][]byte{vectorCheckpoints: []byte(g.editLine(cpText, 2, `"size":6,`, `"size":6,"witness":"w1",`))}, ExitError, nil,
		"checkpoints line 2", `unknown key "witness"`)

	var wrong []vectorDiscrepancy
	for _, c := range []struct {
		poll  string
		lines []int
	}{{"lunch", []int{6, 7, 8}}, {"dinner", []int{3, 4, 5}}, {"board", []int{1, 2}}} {
		for _, n := range c.lines {
			wrong = append(wrong, checkpointField(c.poll, "checkpoint", n))
		}
	}
	g.verify("wrong-key", "another key of the same log name: no checkpoint is signed by it",
		map[string][]byte{vectorKey: []byte(g.otherKey + "\n")}, ExitCheck, wrong)
	g.verify("key-malformed", "the key file holds a key of the log's name whose hash is cut short: not a verifier key, "+
		"so nothing could be checked with it (exit 2), unlike a well-formed key that signed nothing here (wrong-key, exit 1)",
		map[string][]byte{vectorKey: []byte(g.key[:strings.Index(g.key, "+")+5] + "\n")}, ExitError, nil,
		"--key", "malformed verifier key")
}

// flipSignatureByte changes one byte of the Ed25519 signature of the
// signed note msg (past the signature line's four-byte key hash).
func (g *vectorGen) flipSignatureByte(msg string) string {
	i := strings.LastIndex(msg, "\n— ")
	line := msg[i+1 : len(msg)-1]
	sp := strings.LastIndexByte(line, ' ')
	sig, err := base64.StdEncoding.DecodeString(line[sp+1:])
	if err != nil {
		g.t.Fatal(err)
	}
	sig[4+17] ^= 0x01
	return msg[:i+1] + line[:sp+1] + base64.StdEncoding.EncodeToString(sig) + "\n"
}

// flipRootByte changes one byte of the root in the text of the signed
// checkpoint msg, leaving its signature as it was.
func (g *vectorGen) flipRootByte(msg string) string {
	parts := strings.SplitN(msg, "\n", 4) // origin, size, root, the rest
	root, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil {
		g.t.Fatal(err)
	}
	root[9] ^= 0x01
	parts[2] = base64.StdEncoding.EncodeToString(root)
	return strings.Join(parts, "\n")
}

// resultsCases are the published results' tamperings.
func (g *vectorGen) resultsCases() {
	over := func(res []ledger.Results) map[string][]byte {
		return map[string][]byte{vectorResults: resultLines(g.t, res)}
	}
	res := g.honest.results()
	lunch := &res[2]
	lunch.Results = slices.Insert(slices.Clone(lunch.Results), 2, ledger.CandidateVotes{CandidateID: "soup", Votes: 0})
	g.verify("results-candidate-twice", "lunch's results list soup twice, 4 votes then 0: the total holds, but which count is soup's?",
		over(res), ExitCheck, []vectorDiscrepancy{resultsField("lunch", "results")})

	res = g.honest.results()
	res[1].Total++
	g.verify("results-total-not-sum", "dinner's total is 9, its entries sum to 8 (the recount)",
		over(res), ExitCheck, []vectorDiscrepancy{resultsField("dinner", "total"), resultsField("dinner", "total")})

	results := string(g.files[vectorResults])
	g.verify("results-key-case", `results line 3 carries "Total" beside "total"`,
		map[string][]byte{vectorResults: []byte(g.editLine(results, 3, `"total":10,`, `"total":10,"Total":11,`))}, ExitError, nil,
		"results line 3", `key "total" is spelt "Total"`)

	g.verify("results-total-missing", "results line 2 (dinner) without its total: a required key, not read as 0",
		map[string][]byte{vectorResults: []byte(g.editLine(results, 2, `"total":8,`, ``))}, ExitError, nil,
		"results line 2", "total is missing")

	g.verify("results-tree-size-negative", "results line 2 (dinner) with tree_size -1: not a number of leaves",
		map[string][]byte{vectorResults: []byte(g.editLine(results, 2, `"tree_size":8,`, `"tree_size":-1,`))}, ExitError, nil,
		"results line 2", "tree_size is -1")

	g.verify("results-ignored-key-twice", `results line 2 gives "as_of" twice: a key the audit does not read is still given once`,
		map[string][]byte{vectorResults: []byte(g.editLine(results, 2, `"as_of":`, `"as_of":"2026-03-01T09:31:00Z","as_of":`))}, ExitError, nil,
		"results line 2", `key "as_of" is given twice`)

	g.verify("results-entry-votes-missing", `results line 2's entry for pasta has no "votes": not read as 0`,
		map[string][]byte{vectorResults: []byte(g.editLine(results, 2, `{"candidate_id":"pasta","votes":3}`, `{"candidate_id":"pasta"}`))}, ExitError, nil,
		"results line 2", "results entry 2: votes is missing")

	g.verify("results-duplicate-key", `results line 3 gives "total" twice, 10 then 11`,
		map[string][]byte{vectorResults: []byte(g.editLine(results, 3, `"total":10,`, `"total":10,"total":11,`))}, ExitError, nil,
		"results line 3", `key "total" is given twice`)
}

// receiptCases are the voters' receipts, honest and tampered.
func (g *vectorGen) receiptCases() {
	g.receipt("receipt-lunch", "erin's receipt: lunch leaf 4 in the checkpoint of size 7", vectorReceiptLunch, false, nil, ExitOK)
	g.receipt("receipt-lunch-later", "erin's receipt, then lunch's checkpoint of size 10 and the consistency proof from 7 to 10",
		vectorReceiptLunch, true, nil, ExitOK)
	g.receipt("receipt-dinner", "frank's receipt: dinner leaf 5 in the checkpoint of size 8", vectorReceiptDinner, false, nil, ExitOK)

	changed := g.receiptOf("lunch", 4, 7)
	changed.CandidateID = "soup"
	g.receipt("receipt-candidate-changed", "erin's receipt with soup for salad", vectorReceiptLunch, false,
		map[string][]byte{vectorReceiptLunch: g.receiptJSON(changed)}, ExitCheck, "a field was changed")

	g.receipt("receipt-consistency-other-poll", "erin's lunch receipt with dinner's consistency proof from 4 to 8",
		vectorReceiptLunch, true, map[string][]byte{vectorConsistencyLunch: g.consistencyJSON("dinner", 4, 8, nil)}, ExitCheck,
		`the consistency proof is of poll "dinner"`, "use the consistency proof of poll lunch")

	g.receipt("receipt-consistency-byte", "one byte of a hash of lunch's consistency proof from 7 to 10 changed",
		vectorReceiptLunch, true, map[string][]byte{vectorConsistencyLunch: g.consistencyJSON("lunch", 7, 10, func(p *audit.ConsistencyProof) { p.Proof[1][5] ^= 0x01 })},
		ExitCheck, "does not show the tree of size 7 to be a prefix of the tree of size 10")

	g.receipt("receipt-wrong-key", "erin's receipt checked with another key of the same log name", vectorReceiptLunch, false,
		map[string][]byte{vectorKey: []byte(g.otherKey + "\n")}, ExitCheck, "the checkpoint is not signed by key")

	lunch4 := string(g.files[vectorReceiptLunch])
	at := g.receiptOf("lunch", 4, 7).ReceivedAt.Format(audit.ReceivedAtLayout)
	g.receipt("receipt-received-at-7-digits", "erin's receipt with a seventh fractional digit, 0, in received_at: the same instant, "+
		"refused as the export refuses it rather than cut to the microsecond", vectorReceiptLunch, false,
		map[string][]byte{vectorReceiptLunch: []byte(strings.Replace(lunch4, at, strings.TrimSuffix(at, "Z")+"0Z", 1))}, ExitError,
		"received_at", "with 7 fractional digits")

	g.receipt("receipt-received-at-zero-time", "erin's receipt with received_at 0001-01-01T00:00:00Z: refused, as every time before 1970",
		vectorReceiptLunch, false,
		map[string][]byte{vectorReceiptLunch: []byte(strings.Replace(lunch4, at, "0001-01-01T00:00:00.000000Z", 1))}, ExitError,
		"received_at", "before 1970-01-01T00:00:00Z")

	consistency := string(g.files[vectorConsistencyLunch])
	g.receipt("receipt-consistency-key-case", `lunch's consistency proof from 7 to 10 with "Poll_ID" for "poll_id": `+
		"its keys are spelt exactly, as a receipt's", vectorReceiptLunch, true,
		map[string][]byte{vectorConsistencyLunch: []byte(strings.Replace(consistency, `"poll_id"`, `"Poll_ID"`, 1))}, ExitError,
		"consistency proof", `key "poll_id" is spelt "Poll_ID"`)

	g.receipt("receipt-consistency-unknown-key", `lunch's consistency proof with a key it does not have, "note": refused, not skipped`,
		vectorReceiptLunch, true,
		map[string][]byte{vectorConsistencyLunch: []byte(strings.Replace(consistency, `{`, `{"note":"x",`, 1))}, ExitError,
		"consistency proof", `unknown key "note"`)

	g.receipt("receipt-consistency-from-root", "lunch's consistency proof from 7 to 10 whose from_root is not the receipt's checkpoint's root "+
		"(one byte changed), its proof hashes kept", vectorReceiptLunch, true,
		map[string][]byte{vectorConsistencyLunch: g.consistencyJSON("lunch", 7, 10, func(p *audit.ConsistencyProof) { p.FromRoot[0] ^= 0x01 })},
		ExitCheck, "the proof is of other trees than the checkpoints'")

	g.receipt("receipt-consistency-to-root", "lunch's consistency proof from 7 to 10 whose to_root is not the later checkpoint's root",
		vectorReceiptLunch, true,
		map[string][]byte{vectorConsistencyLunch: g.consistencyJSON("lunch", 7, 10, func(p *audit.ConsistencyProof) { p.ToRoot[31] ^= 0x01 })},
		ExitCheck, "the proof is of other trees than the checkpoints'")

	r4 := g.receiptOf("lunch", 4, 7)
	status := func(extra string) []byte {
		return []byte(fmt.Sprintf(`{"event_id":%q,"poll_id":"lunch","candidate_id":"salad","status":"recorded",%s"receipt":%s}`+"\n",
			r4.EventID, extra, strings.TrimSpace(lunch4)))
	}
	g.receipt("receipt-in-status", "erin's receipt inside her vote's status, as GET /v1/votes/{event_id} answers it",
		vectorReceiptLunch, false, map[string][]byte{vectorReceiptLunch: status("")}, ExitOK)

	g.receipt("receipt-status-unknown-key", `erin's vote's status with a key a status does not have, "verified":true: refused, not skipped`,
		vectorReceiptLunch, false, map[string][]byte{vectorReceiptLunch: status(`"verified":true,`)}, ExitError,
		"vote status", `unknown key "verified"`)

	g.receipt("receipt-status-key-case", `erin's vote's status with "Receipt" for "receipt": not read as its receipt`,
		vectorReceiptLunch, false, map[string][]byte{vectorReceiptLunch: bytes.Replace(status(""), []byte(`"receipt":`), []byte(`"Receipt":`), 1)},
		ExitError, "vote status", `key "receipt" is spelt "Receipt"`)

	whole := g.files[vectorReceiptLunch]
	g.receipt("receipt-truncated", "erin's receipt cut in half", vectorReceiptLunch, false,
		map[string][]byte{vectorReceiptLunch: whole[:len(whole)/2]}, ExitError, "malformed receipt")
}

// receiptOf is the receipt of poll's leaf index in its honest checkpoint
// of size.
func (g *vectorGen) receiptOf(poll string, index, size int64) audit.Receipt {
	tree := g.honest.trees[poll]
	proof, err := tree.InclusionProof(index, size)
	if err != nil {
		g.t.Fatal(err)
	}
	for _, r := range g.honest.rows {
		if r.PollID == poll && *r.LeafIndex == index {
			rc, err := audit.NewReceipt(r.Leaf(), index, size, []byte(g.honest.note(g.t, poll, size)), proof)
			if err != nil {
				g.t.Fatal(err)
			}
			return rc
		}
	}
	g.t.Fatalf("no leaf %d in poll %s", index, poll)
	return audit.Receipt{}
}

func (g *vectorGen) receiptJSON(r audit.Receipt) []byte {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		g.t.Fatal(err)
	}
	return append(b, '\n')
}

// consistencyJSON is the consistency proof of poll's honest tree from
// size from to size to, as GET /v1/polls/{poll_id}/consistency answers
// it, after edit (when not nil) has changed it.
func (g *vectorGen) consistencyJSON(poll string, from, to int64, edit func(*audit.ConsistencyProof)) []byte {
	tree := g.honest.trees[poll]
	proof, err := tree.ConsistencyProof(from, to)
	if err != nil {
		g.t.Fatal(err)
	}
	fromRoot, _ := tree.Root(from)
	toRoot, _ := tree.Root(to)
	p := audit.ConsistencyProof{PollID: poll, From: from, To: to, Proof: proof, FromRoot: fromRoot, ToRoot: toRoot}
	if edit != nil {
		edit(&p)
	}
	b, err := json.Marshal(p)
	if err != nil {
		g.t.Fatal(err)
	}
	return append(b, '\n')
}

// editLine replaces old by new in line n (from 1) of text, where old must
// occur exactly once: a tampering that changes nothing is a bug of the
// generator, not a case.
func (g *vectorGen) editLine(text string, n int, old, new string) string {
	g.t.Helper()
	lines := strings.SplitAfter(text, "\n")
	if c := strings.Count(lines[n-1], old); c != 1 {
		g.t.Fatalf("line %d holds %q %d times, not once: %s", n, old, c, lines[n-1])
	}
	lines[n-1] = strings.Replace(lines[n-1], old, new, 1)
	return strings.Join(lines, "")
}

// verify adds a case of tally audit verify on the base files, each file
// of over (by name) replaced by its tampered copy in tampered/name/.
func (g *vectorGen) verify(name, about string, over map[string][]byte, exit int, want []vectorDiscrepancy, errs ...string) {
	g.verifyEligible(name, about, over, nil, exit, want, errs...)
}

// verifyEligible is verify with eligible lists given: the base file of
// each poll's list, by poll (replaced by its copy in over, if any).
func (g *vectorGen) verifyEligible(name, about string, over map[string][]byte, eligible map[string]string, exit int,
	want []vectorDiscrepancy, errs ...string) {
	f := g.overrides(name, over)
	base := g.base
	var before []string
	if base == (vectorBase{}) {
		base = vectorBase{vectorExport, vectorCheckpoints, vectorResults}
		before = g.before
	}
	c := vectorCase{Name: name, About: about, Command: "verify", Exit: exit, ErrorContains: errs, BeforeDefinitions: before, Files: vectorFiles{
		Export: f(base.export), Checkpoints: f(base.checkpoints), Key: f(vectorKey), Results: f(base.results)}}
	for poll, file := range eligible {
		if c.Files.Eligible == nil {
			c.Files.Eligible = map[string]string{}
		}
		c.Files.Eligible[poll] = f(file)
	}
	if exit == ExitCheck {
		c.Discrepancies = want
		fields := []string{}
		for _, d := range want {
			if d.Field != "" && !slices.Contains(fields, d.Field) {
				fields = append(fields, d.Field)
			}
		}
		slices.Sort(fields)
		c.Fields = &fields
	}
	g.cases = append(g.cases, c)
}

// receipt adds a case of tally audit receipt on the base receipt file
// (with the later checkpoint and its consistency proof when later), each
// file of over replaced by its tampered copy.
func (g *vectorGen) receipt(name, about, receipt string, later bool, over map[string][]byte, exit int, says ...string) {
	f := g.overrides(name, over)
	c := vectorCase{Name: name, About: about, Command: "receipt", Exit: exit, ErrorContains: says,
		Files: vectorFiles{Receipt: f(receipt), Key: f(vectorKey)}}
	if later {
		c.Files.Checkpoint, c.Files.Consistency = f(vectorLaterLunch), f(vectorConsistencyLunch)
	}
	g.cases = append(g.cases, c)
}

// overrides writes over into tampered/name/ and returns where each base
// file of the case is: its tampered copy if there is one.
func (g *vectorGen) overrides(name string, over map[string][]byte) func(string) string {
	for file, b := range over {
		if _, ok := g.files[file]; !ok {
			g.t.Fatalf("case %s: %s replaces no base file", name, file)
		}
		if bytes.Equal(b, g.files[file]) {
			g.t.Fatalf("case %s: its %s is the honest one", name, file)
		}
		g.files["tampered/"+name+"/"+file] = b
	}
	return func(file string) string {
		if _, ok := over[file]; ok {
			return "tampered/" + name + "/" + file
		}
		return file
	}
}

// The discrepancies a case expects, by kind.
func rowField(poll string, leaf int64, field string, line int) vectorDiscrepancy {
	return vectorDiscrepancy{PollID: poll, Leaves: &audit.LeafRange{First: leaf, Last: leaf}, Field: field, ExportLine: line}
}

// rootDiffers is a checkpoint whose root is not the export's at its size
// (or whose size is past the export's): it has no field.
func rootDiffers(poll string, first, last int64, cpLine int) vectorDiscrepancy {
	return vectorDiscrepancy{PollID: poll, Leaves: &audit.LeafRange{First: first, Last: last}, CheckpointLine: cpLine}
}

func checkpointField(poll, field string, cpLine int) vectorDiscrepancy {
	return vectorDiscrepancy{PollID: poll, Field: field, CheckpointLine: cpLine}
}

func resultsField(poll, field string) vectorDiscrepancy {
	return vectorDiscrepancy{PollID: poll, Field: field}
}
