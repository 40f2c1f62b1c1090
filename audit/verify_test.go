package audit_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"tally/audit"
)

// exportRows are n rows of poll as a ledger holds them: principals that
// answer several polls use an event id of their own in each.
func exportRows(poll string, n int) []audit.ExportRow {
	out := make([]audit.ExportRow, n)
	for i := range out {
		l := testLeaf(poll, i)
		out[i] = audit.ExportRow{EventID: l.ClientEventID + "-" + poll, PollID: poll, CandidateID: l.CandidateID,
			PrincipalID: l.PrincipalID, ReceivedAt: l.ReceivedAt}
	}
	return out
}

// interleave merges polls' rows as one ledger: a row of each in turn.
func interleave(polls ...[]audit.ExportRow) []audit.ExportRow {
	var out []audit.ExportRow
	for i := 0; ; i++ {
		added := false
		for _, p := range polls {
			if i < len(p) {
				out = append(out, p[i])
				added = true
			}
		}
		if !added {
			return out
		}
	}
}

// exportFile writes rows as tally export does, numbering seq afresh (as a
// tamperer with the database would leave it).
func exportFile(t testing.TB, rows []audit.ExportRow) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for i, r := range rows {
		r.Seq = int64(i + 1)
		if err := enc.Encode(r); err != nil {
			t.Fatal(err)
		}
	}
	return &buf
}

// signAt signs checkpoints of poll's tree, built from rows (the rows of
// every poll, in ledger order), at each of sizes.
func signAt(t testing.TB, s note.Signer, poll string, rows []audit.ExportRow, sizes ...int64) []audit.StoredCheckpoint {
	t.Helper()
	var tr audit.Tree
	for _, r := range rows {
		if r.PollID == poll {
			if err := tr.AppendLeaf(r.Leaf()); err != nil {
				t.Fatal(err)
			}
		}
	}
	var out []audit.StoredCheckpoint
	for _, size := range sizes {
		root, err := tr.Root(size)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, audit.StoredCheckpoint{PollID: poll, Size: size,
			Checkpoint: string(sign(t, s, audit.Origin(s.Name(), poll), size, root))})
	}
	return out
}

func sizes(from, to int64) []int64 {
	var out []int64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

type auditFixture struct {
	k           keys
	rows        []audit.ExportRow // polls p (20 rows) and q (10), interleaved
	checkpoints []audit.StoredCheckpoint
}

// setupAudit is a ledger of two polls and a checkpoint of every size of
// each, signed before any tampering.
func setupAudit(t *testing.T) auditFixture {
	k := testKeys(t)
	rows := interleave(exportRows("p", 20), exportRows("q", 10))
	cps := append(signAt(t, k.signer, "p", rows, sizes(0, 20)...), signAt(t, k.signer, "q", rows, sizes(1, 10)...)...)
	return auditFixture{k, rows, cps}
}

func (f auditFixture) verify(t *testing.T, rows []audit.ExportRow, cps []audit.StoredCheckpoint, results []audit.PublishedResults) audit.Report {
	t.Helper()
	rep, err := verifyLegacy(exportFile(t, rows), cps, []note.Verifier{f.k.verifier}, results)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// pollRowIndex is the place in rows of poll's leaf index.
func pollRowIndex(rows []audit.ExportRow, poll string, index int) int {
	for i, r := range rows {
		if r.PollID == poll {
			if index == 0 {
				return i
			}
			index--
		}
	}
	panic("no such leaf")
}

func TestVerifyExportClean(t *testing.T) {
	f := setupAudit(t)
	rep := f.verify(t, f.rows, f.checkpoints, nil)
	if !rep.OK() {
		t.Fatalf("clean export: %v", rep.Discrepancies)
	}
	if rep.Rows != 30 || len(rep.Polls) != 2 || rep.Polls[0].CheckpointsVerified != 21 || rep.Polls[0].LargestCheckpoint != 20 {
		t.Fatalf("report %+v", rep)
	}
	want := []audit.Tally{{CandidateID: "c0", Votes: 5}, {CandidateID: "c1", Votes: 5}, {CandidateID: "c2", Votes: 5}, {CandidateID: "c3", Votes: 5}}
	if !slices.Equal(rep.Polls[0].Tallies, want) {
		t.Fatalf("tallies %+v, want %+v", rep.Polls[0].Tallies, want)
	}
}

// Each change to the ledger after its checkpoints were signed is found,
// and placed at the leaf where it happened: the checkpoint of size 8 is
// the first one whose root differs, the one of size 7 still matches.
func TestVerifyExportTamper(t *testing.T) {
	f := setupAudit(t)
	const leaf = 7
	at := pollRowIndex(f.rows, "p", leaf)
	extra := exportRows("p", 30)[25]
	for _, tc := range []struct {
		name   string
		tamper func([]audit.ExportRow) []audit.ExportRow
	}{
		{"changed candidate", func(r []audit.ExportRow) []audit.ExportRow { r[at].CandidateID = "c9"; return r }},
		{"changed time", func(r []audit.ExportRow) []audit.ExportRow { r[at].ReceivedAt = r[at].ReceivedAt.Add(1000); return r }},
		{"deleted row", func(r []audit.ExportRow) []audit.ExportRow { return slices.Delete(r, at, at+1) }},
		{"inserted row", func(r []audit.ExportRow) []audit.ExportRow { return slices.Insert(r, at, extra) }},
		{"swapped rows", func(r []audit.ExportRow) []audit.ExportRow {
			next := pollRowIndex(r, "p", leaf+1)
			r[at], r[next] = r[next], r[at]
			return r
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := f.verify(t, tc.tamper(slices.Clone(f.rows)), f.checkpoints, nil)
			if rep.OK() {
				t.Fatal("tampered export verified")
			}
			first := rep.Discrepancies[0]
			if first.PollID != "p" || first.Leaves == nil || *first.Leaves != (audit.LeafRange{First: leaf, Last: leaf}) || first.CheckpointLine == 0 {
				t.Fatalf("first discrepancy %v, want one naming leaf %d of poll p and its checkpoint", first, leaf)
			}
			if !strings.Contains(first.String(), "leaf 7") || !strings.Contains(first.String(), "checkpoint line") {
				t.Errorf("discrepancy reads %q", first)
			}
			for _, d := range rep.Discrepancies {
				if d.PollID != "p" {
					t.Errorf("a discrepancy in the untouched poll: %v", d)
				}
			}
		})
	}
}

// With one checkpoint issued before the change, the change is found and
// placed below its size.
func TestVerifyExportTamperOneCheckpoint(t *testing.T) {
	f := setupAudit(t)
	cps := signAt(t, f.k.signer, "p", f.rows, 15)
	rows := slices.Clone(f.rows)
	rows[pollRowIndex(rows, "p", 7)].CandidateID = "c9"
	rep := f.verify(t, rows, cps, nil)
	if len(rep.Discrepancies) != 1 || *rep.Discrepancies[0].Leaves != (audit.LeafRange{First: 0, Last: 14}) ||
		!strings.Contains(rep.Discrepancies[0].Detail, "a leaf from 0 to 14 was changed") {
		t.Fatalf("discrepancies %v, want one placing the change in leaves 0-14", rep.Discrepancies)
	}
}

// The operator holds the key, rewrites a poll's log (leaf 3's candidate)
// and signs a checkpoint of the new tree: it verifies on its own, but the
// checkpoints signed before do not, so the new tree is no extension of
// them.
func TestVerifyExportRewrittenLog(t *testing.T) {
	f := setupAudit(t)
	rows := slices.Clone(f.rows)
	rows[pollRowIndex(rows, "p", 3)].CandidateID = "c9"
	rewritten := signAt(t, f.k.signer, "p", rows, 20)
	if rep := f.verify(t, rows, rewritten, nil); !rep.OK() {
		t.Fatalf("the rewritten log against its own checkpoint: %v", rep.Discrepancies)
	}
	earlier := signAt(t, f.k.signer, "p", f.rows, 2, 10, 16)
	rep := f.verify(t, rows, append(earlier, rewritten...), nil)
	var lines []int
	for _, d := range rep.Discrepancies {
		lines = append(lines, d.CheckpointLine)
	}
	if !slices.Equal(lines, []int{2, 3}) || *rep.Discrepancies[0].Leaves != (audit.LeafRange{First: 2, Last: 9}) {
		t.Fatalf("discrepancies %v, want the checkpoints of sizes 10 and 16 (lines 2, 3), the first placing the change in leaves 2-9", rep.Discrepancies)
	}
}

// What a stored checkpoint itself can get wrong: signed by another key,
// for another poll, a size line that disagrees with its note, larger than
// the export, a poll the export lacks.
func TestVerifyExportBadCheckpoints(t *testing.T) {
	f := setupAudit(t)
	forged := signAt(t, f.k.forger, "p", f.rows, 5)[0]
	otherPoll := signAt(t, f.k.signer, "q", f.rows, 5)[0]
	otherPoll.PollID = "p"
	sizeLine := signAt(t, f.k.signer, "p", f.rows, 5)[0]
	sizeLine.Size = 6
	more := signAt(t, f.k.signer, "p", append(slices.Clone(f.rows), exportRows("p", 22)[20:]...), 22)[0]
	absent := signAt(t, f.k.signer, "r", exportRows("r", 3), 3)[0]
	for _, tc := range []struct {
		name   string
		cp     audit.StoredCheckpoint
		field  string
		detail string
		leaves *audit.LeafRange // the leaves missing from the export
	}{
		{"forged", forged, "checkpoint", "not signed by key tally.example.org+41a1df5e", nil},
		{"other poll", otherPoll, "checkpoint", "not \"tally.example.org/polls/p\"", nil},
		{"size line", sizeLine, "size", "says size 6", nil},
		{"larger than the export", more, "", "the export holds 20", &audit.LeafRange{First: 20, Last: 21}},
		{"poll not exported", absent, "", "the export holds 0", &audit.LeafRange{First: 0, Last: 2}},
	} {
		rep := f.verify(t, f.rows, []audit.StoredCheckpoint{tc.cp}, nil)
		if len(rep.Discrepancies) != 1 {
			t.Errorf("%s: discrepancies %v, want one", tc.name, rep.Discrepancies)
			continue
		}
		d := rep.Discrepancies[0]
		if d.Field != tc.field || !strings.Contains(d.Detail, tc.detail) || d.CheckpointLine != 1 {
			t.Errorf("%s: %v, want field %q saying %q on checkpoint line 1", tc.name, d, tc.field, tc.detail)
		}
		if (d.Leaves == nil) != (tc.leaves == nil) || d.Leaves != nil && *d.Leaves != *tc.leaves {
			t.Errorf("%s: leaves %v, want %v", tc.name, d.Leaves, tc.leaves)
		}
	}
}

// After a key rotation the checkpoints of both keys verify when both
// verifier keys are given; with only the new one, the old checkpoints are
// named as not signed by it.
func TestVerifyExportRotatedKey(t *testing.T) {
	f := setupAudit(t)
	cps := append(signAt(t, f.k.signer, "p", f.rows, 5), signAt(t, f.k.rotated, "p", f.rows, 20)...)
	both := []note.Verifier{f.k.verifier, f.k.rotatedV}
	rep, err := verifyLegacy(exportFile(t, f.rows), cps, both, nil)
	if err != nil || !rep.OK() || rep.Polls[0].CheckpointsVerified != 2 {
		t.Fatalf("both keys: %+v, %v", rep, err)
	}
	rep, err = verifyLegacy(exportFile(t, f.rows), cps, []note.Verifier{f.k.rotatedV}, nil)
	if err != nil || len(rep.Discrepancies) != 1 || rep.Discrepancies[0].CheckpointLine != 1 {
		t.Fatalf("only the new key: %+v, %v", rep.Discrepancies, err)
	}
}

// A leaf_index that is not the row's place, a row repeated (its seq seen
// twice) and a second answer of one principal are named by export line;
// rows of two polls interleaved otherwise are not a discrepancy.
func TestVerifyExportRowChecks(t *testing.T) {
	f := setupAudit(t)
	buf := exportFile(t, f.rows)
	lines := strings.SplitAfter(buf.String(), "\n")
	lines[3], lines[4] = lines[4], lines[3] // q's leaf 1 after p's leaf 2: each poll's order holds
	lines[5] = strings.Replace(lines[5], `"seq":6,`, `"seq":6,"leaf_index":9,`, 1)
	dup := exportRows("p", 1)[0]
	dup.EventID = "e-again"
	dup.Seq = 2
	b, _ := json.Marshal(dup)
	lines = append(lines, string(b)+"\n")
	rep, err := verifyLegacy(strings.NewReader(strings.Join(lines, "")), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range rep.Discrepancies {
		got = append(got, fmt.Sprintf("%s %d %s %d", d.PollID, d.Leaves.First, d.Field, d.ExportLine))
	}
	want := []string{"q 2 leaf_index 6", "p 20 seq 31", "p 20 principal_id 31"}
	if !slices.Equal(got, want) {
		t.Fatalf("discrepancies %q, want %q", got, want)
	}
}

func TestVerifyExportResults(t *testing.T) {
	f := setupAudit(t)
	size, all := int64(12), int64(20)
	good := []audit.PublishedResults{
		{PollID: "p", Total: 20, Results: []audit.Tally{{CandidateID: "c0", Votes: 5}, {CandidateID: "c1", Votes: 5}, {CandidateID: "c2", Votes: 5}, {CandidateID: "c3", Votes: 5}, {CandidateID: "unvoted", Votes: 0}}},
		{PollID: "q", Total: 0, Results: []audit.Tally{{CandidateID: "c0", Votes: 0}}, TreeSize: new(int64)},
		{PollID: "p", Total: 12, Results: []audit.Tally{{CandidateID: "c0", Votes: 3}, {CandidateID: "c1", Votes: 3}, {CandidateID: "c2", Votes: 3}, {CandidateID: "c3", Votes: 3}}, TreeSize: &size},
		{PollID: "p", Total: 20, Results: []audit.Tally{{CandidateID: "c0", Votes: 5}, {CandidateID: "c1", Votes: 5}, {CandidateID: "c2", Votes: 5}, {CandidateID: "c3", Votes: 5}}, TreeSize: &all}, // the whole export
	}
	if rep := f.verify(t, f.rows, nil, good); !rep.OK() || rep.Polls[0].ResultsCompared != 3 {
		t.Fatalf("published results equal to the recount: %v", rep.Discrepancies)
	}
	bad := []audit.PublishedResults{
		{PollID: "p", Total: 20, Results: []audit.Tally{{CandidateID: "c0", Votes: 6}, {CandidateID: "c1", Votes: 4}, {CandidateID: "c2", Votes: 5}, {CandidateID: "c3", Votes: 5}}},
		{PollID: "q", Total: 9, Results: []audit.Tally{{CandidateID: "c0", Votes: 3}, {CandidateID: "c1", Votes: 2}, {CandidateID: "c2", Votes: 2}}},
		{PollID: "p", Total: 0, Results: nil, TreeSize: &[]int64{21}[0]},
		{PollID: "r", Total: 3, Results: []audit.Tally{{CandidateID: "c0", Votes: 3}}}, // a poll the export does not hold
	}
	rep := f.verify(t, f.rows, nil, bad)
	var got []string
	object := regexp.MustCompile(`^results object \d+`)
	for _, d := range rep.Discrepancies {
		got = append(got, d.PollID+" "+d.Field+" "+object.FindString(d.Detail))
	}
	want := []string{"p votes results object 1", "p votes results object 1", "q votes results object 2", "q results results object 2",
		"q total results object 2", "q total results object 2", "p tree_size results object 3", "r votes results object 4", "r total results object 4"}
	if !slices.Equal(got, want) {
		t.Fatalf("discrepancies %v, want fields %q", rep.Discrepancies, want)
	}
}

// TestVerifyExportKeysAndResults: a (principal, event id) used in two
// polls, a candidate listed twice in published results, and a total that
// is not the sum of its entries are each a discrepancy; the leaves no
// checkpoint signs are counted per poll.
func TestVerifyExportKeysAndResults(t *testing.T) {
	f := setupAudit(t)
	rows := slices.Clone(f.rows)
	i := pollRowIndex(rows, "q", 3)
	rows[i].PrincipalID, rows[i].EventID = "p-15", "e-15-p" // the key of p's leaf 15
	cps := append(signAt(t, f.k.signer, "p", rows, 10), signAt(t, f.k.signer, "q", rows, 3)...)
	results := []audit.PublishedResults{{PollID: "p", Results: []audit.Tally{{CandidateID: "c0", Votes: 5}, {CandidateID: "c0", Votes: 5}, {CandidateID: "c1", Votes: 5}, {CandidateID: "c2", Votes: 5}, {CandidateID: "c3", Votes: 5}}, Total: 20}}
	rep := f.verify(t, rows, cps, results)
	var got []string
	for _, d := range rep.Discrepancies {
		got = append(got, d.PollID+" "+d.Field)
	}
	want := []string{"p event_id", "p results", "p total"} // the later of the two rows, p's
	if !slices.Equal(got, want) {
		t.Fatalf("discrepancies %v, want %q", rep.Discrepancies, want)
	}
	unsigned := map[string]int64{}
	for _, p := range rep.Polls {
		unsigned[p.PollID] = p.UnsignedLeaves
	}
	if unsigned["p"] != 10 || unsigned["q"] != 7 || rep.UnsignedLeaves() != 17 {
		t.Errorf("unsigned leaves %v (%d in all), want p 10, q 7 (17)", unsigned, rep.UnsignedLeaves())
	}
}

// TestReadResults: results are JSON lines, one object a line as the
// endpoint answers it; the keys the audit reads are spelt exactly and
// given once, other keys are ignored.
func TestReadResults(t *testing.T) {
	in := `{"poll_id":"p","results":[{"candidate_id":"a","votes":2}],"total":2,"as_of":"2026-01-01T00:00:00Z"}

{"poll_id": "q", "results": [], "total": 0, "tree_size": 0}
`
	got, err := audit.ReadResults(strings.NewReader(in))
	if err != nil || len(got) != 2 || got[0].Results[0].Votes != 2 || got[1].TreeSize == nil {
		t.Fatalf("read %+v, %v", got, err)
	}
	for _, tc := range []struct{ in, says string }{
		{`{"poll_id":"a b","results":[],"total":0}`, "invalid"},
		{`{"poll_id":"p","results":[]}`, "total is missing or null"},
		{`{"poll_id":"p","results":[],"total":null}`, "total is missing or null"},
		{`{"poll_id":"p","total":0}`, "results is missing or null"},
		{`{"poll_id":"p","results":[],"total":0,"tree_size":-1}`, "tree_size is -1"},
		{`{"poll_id":"p","results":[{"candidate_id":"a"}],"total":0}`, "results entry 1: votes is missing"},
		{`{"poll_id":"p","results":[{"votes":1}],"total":1}`, "results entry 1: candidate_id is missing"},
		{`{"poll_id":"p","total":"2"}`, "total"},
		{`{`, "unexpected EOF"},
		{"{\n  \"poll_id\": \"q\", \"results\": [], \"total\": 0\n}", "unexpected EOF"}, // an object over lines
		{`{"poll_id":"p","results":[],"total":0} {"poll_id":"q"}`, "data follows"},
		{`{"poll_id":"p","results":[],"total":0,"Total":5}`, `key "total" is spelt "Total"`},
		{`{"poll_id":"p","results":[],"total":0,"total":5}`, `key "total" is given twice`},
		{`{"poll_id":"p","results":[{"candidate_id":"a","votes":1,"Votes":7}],"total":1}`, `results entry 1: key "votes" is spelt "Votes"`},
	} {
		if _, err := audit.ReadResults(strings.NewReader(tc.in)); err == nil || !strings.Contains(err.Error(), "results line 1") ||
			!strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: error %v, want one naming line 1 and saying %q", tc.in, err, tc.says)
		}
		second := `{"poll_id":"p","results":[],"total":0}` + "\n" + tc.in
		if _, err := audit.ReadResults(strings.NewReader(second)); err == nil || !strings.Contains(err.Error(), "results line 2") {
			t.Errorf("%s after a good line: error %v, want one naming line 2", tc.in, err)
		}
	}
}

// A discrepancy reads as the poll, then what it names (a leaf or leaves,
// a field, an export line, a checkpoint line), then what did not hold.
func TestDiscrepancyString(t *testing.T) {
	for _, tc := range []struct {
		d    audit.Discrepancy
		want string
	}{
		{audit.Discrepancy{PollID: "p", Detail: "d"}, "poll p: d"},
		{audit.Discrepancy{PollID: "p", Leaves: &audit.LeafRange{First: 0, Last: 0}, Detail: "d"}, "poll p, leaf 0: d"},
		{audit.Discrepancy{PollID: "p", Leaves: &audit.LeafRange{First: 2, Last: 9}, CheckpointLine: 1, Detail: "d"}, "poll p, leaves 2-9, checkpoint line 1: d"},
		{audit.Discrepancy{PollID: "p", Leaves: &audit.LeafRange{First: 3, Last: 3}, Field: "seq", ExportLine: 1, Detail: "d"}, "poll p, leaf 3, field seq, export line 1: d"},
		{audit.Discrepancy{PollID: "q", Field: "total", Detail: "d"}, "poll q, field total: d"},
	} {
		if got := tc.d.String(); got != tc.want {
			t.Errorf("%+v reads %q, want %q", tc.d, got, tc.want)
		}
	}
}

// An export the audit cannot read is an error naming its line, not a
// report.
func TestVerifyExportUnreadable(t *testing.T) {
	for _, tc := range []struct{ in, says string }{
		{"{\"poll_id\":\"p\"}\nnot json\n", `line 1: field "event_id" is missing`},
		{`{"event_id":"e","poll_id":"p","candidate_id":"a","principal_id":"x"}`, "line 1: received_at is missing"},
		{"\nnot json\n", "line 2"},
		{`{"event_id":"e","poll_id":"p q","candidate_id":"a","principal_id":"x","received_at":"2026-01-01T00:00:00Z"}`, "poll_id"},
	} {
		_, err := verifyLegacy(strings.NewReader(tc.in), nil, nil, nil)
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%q: error %v, want one saying %q", tc.in, err, tc.says)
		}
	}
	k := testKeys(t)
	cps := signAt(t, k.signer, "p", nil, 0)
	if _, err := verifyLegacy(strings.NewReader(""), cps, nil, nil); err == nil {
		t.Error("checkpoints without a verifier key were not refused")
	}
}

// BenchmarkVerifyExport1M audits an export file of a million events of
// one poll against 100 checkpoints and its published results. With
// -short (make test runs every benchmark once, under -race) the file has
// 10,000 events.
func BenchmarkVerifyExport1M(b *testing.B) {
	n := 1_000_000
	if testing.Short() {
		n = 10_000
	}
	k := testKeys(b)
	path := filepath.Join(b.TempDir(), "export.jsonl")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	var tr audit.Tree
	var cps []audit.StoredCheckpoint
	for i := range n {
		l := testLeaf("bench", i)
		if err := enc.Encode(audit.ExportRow{Seq: int64(i + 1), EventID: l.ClientEventID, PollID: l.PollID,
			CandidateID: l.CandidateID, PrincipalID: l.PrincipalID, ReceivedAt: l.ReceivedAt}); err != nil {
			b.Fatal(err)
		}
		if err := tr.AppendLeaf(l); err != nil {
			b.Fatal(err)
		}
		if tr.Size()%int64(n/100) == 0 {
			root, _ := tr.Root(tr.Size())
			cps = append(cps, audit.StoredCheckpoint{PollID: "bench", Size: tr.Size(),
				Checkpoint: string(sign(b, k.signer, audit.Origin(testLogName, "bench"), tr.Size(), root))})
		}
	}
	if err := errors.Join(w.Flush(), f.Close()); err != nil {
		b.Fatal(err)
	}
	quarter := int64(n / 4)
	results := []audit.PublishedResults{{PollID: "bench", Total: int64(n),
		Results: []audit.Tally{{CandidateID: "c0", Votes: quarter}, {CandidateID: "c1", Votes: quarter}, {CandidateID: "c2", Votes: quarter}, {CandidateID: "c3", Votes: quarter}}}}
	b.ResetTimer()
	for b.Loop() {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		rep, err := verifyLegacy(f, cps, []note.Verifier{k.verifier}, results)
		f.Close()
		if err != nil || !rep.OK() {
			b.Fatalf("%v %v", err, rep.Discrepancies)
		}
	}
}

// verifyLegacy is VerifyExport with every poll of export named as from
// before definitions, as the logs these tests build (votes only) are:
// what is checked here is not whether a log begins with its definition
// (TestVerifyLogBeginsWithDefinition is).
func verifyLegacy(export io.Reader, cps []audit.StoredCheckpoint, verifiers []note.Verifier, results []audit.PublishedResults) (audit.Report, error) {
	b, err := io.ReadAll(export)
	if err != nil {
		return audit.Report{}, err
	}
	var polls []string
	for _, line := range bytes.Split(b, []byte("\n")) {
		if r, err := audit.ParseExportLine(line); err == nil && !slices.Contains(polls, r.PollID) {
			polls = append(polls, r.PollID)
		}
	}
	return audit.Verify(bytes.NewReader(b), audit.Inputs{Checkpoints: cps, Verifiers: verifiers, Results: results, BeforeDefinitions: polls})
}

// A log that begins with a vote is a discrepancy "definition" at its
// first line, unless its poll is named as from before definitions; a
// poll named that the export does not hold is an error.
func TestVerifyLogBeginsWithDefinition(t *testing.T) {
	rows := []audit.ExportRow{
		{PollID: "old", EventID: "e-1", CandidateID: "a", PrincipalID: "u-1", ReceivedAt: time.Unix(1_700_000_000, 0)},
		{PollID: "new", EventID: "e-2", CandidateID: "a", PrincipalID: "u-1", ReceivedAt: time.Unix(1_700_000_001, 0)},
	}
	var b []byte
	for _, r := range rows {
		b = audit.AppendExportLine(b, r)
	}
	rep, err := audit.Verify(bytes.NewReader(b), audit.Inputs{BeforeDefinitions: []string{"old"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Discrepancies) != 1 || rep.Discrepancies[0].PollID != "new" || rep.Discrepancies[0].Field != "definition" ||
		rep.Discrepancies[0].ExportLine != 2 || rep.Discrepancies[0].Leaves == nil || rep.Discrepancies[0].Leaves.First != 0 {
		t.Fatalf("discrepancies %v, want one of poll new, field definition, leaf 0, line 2", rep.Discrepancies)
	}
	if rep, err := audit.Verify(bytes.NewReader(b), audit.Inputs{BeforeDefinitions: []string{"old", "new"}}); err != nil || !rep.OK() {
		t.Fatalf("both named: %v %v", rep.Discrepancies, err)
	}
	if _, err := audit.Verify(bytes.NewReader(b), audit.Inputs{BeforeDefinitions: []string{"old", "gone"}}); err == nil ||
		!strings.Contains(err.Error(), "poll gone is named as from before definitions, but the export does not hold it") {
		t.Fatalf("a poll named that the export lacks: %v", err)
	}
	if _, err := audit.Verify(bytes.NewReader(b), audit.Inputs{BeforeDefinitions: []string{"not an id"}}); err == nil ||
		!strings.Contains(err.Error(), "is not a poll id") {
		t.Fatalf("a name that is not an id: %v", err)
	}
}
