package cli

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"tally/audit"
	"tally/internal/testenv"
)

// This file owns the tests that hold docs/audit.md ("The export") and the
// JSON Schemas beside it to the code: the lines a real tally export,
// tally export --checkpoints and GET /v1/polls/{poll_id}/results write
// are valid against the schemas, and the schemas and the readers
// (audit.ParseExportLine, audit.ReadCheckpoints, audit.ReadResults)
// refuse the same hand-written lines, but for what the document says a
// schema cannot say.

// lineSchemas are the JSON Schemas of docs/, one per file an audit reads.
type lineSchemas struct{ export, checkpoint, results *jsonschema.Schema }

// loadLineSchemas compiles the schemas, checked against the draft 2020-12
// meta-schema, with format asserted (docs/audit.md: "a validator that
// asserts format refuses it, as tally does").
func loadLineSchemas(t *testing.T) lineSchemas {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	compile := func(name string) *jsonschema.Schema {
		s, err := c.Compile(filepath.Join("..", "docs", name))
		if err != nil {
			t.Fatalf("compile docs/%s: %v", name, err)
		}
		return s
	}
	return lineSchemas{compile("export-line.schema.json"), compile("checkpoint-line.schema.json"), compile("results-line.schema.json")}
}

// validateLine validates line, one JSON value, against s; nil when it is
// valid.
func validateLine(s *jsonschema.Schema, line string) error {
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(line))
	if err != nil {
		return err
	}
	return s.Validate(v)
}

// eachFileLine calls fn with each line of the file at path, without its
// newline, failing t unless every line ends in one.
func eachFileLine(t *testing.T, path string, fn func(line string, n int)) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Fatalf("%s does not end in a newline", path)
	}
	lines := strings.SplitAfter(string(b), "\n")
	lines = lines[:len(lines)-1]
	for i, l := range lines {
		fn(strings.TrimSuffix(l, "\n"), i+1)
	}
	return len(lines)
}

// TestExportMatchesSchemas makes a real export of two polls (votes applied
// by the projector from the stream and imported with tally import, two
// imported events rejected, one row inserted behind the append's back),
// its checkpoints signed by the projector, and the results intake
// answers, and checks every line against the schemas of docs/ and
// against the format docs/audit.md gives: the export's lines as
// audit.AppendExportLine writes them, each poll's in leaf order, the row
// in no leaf last, no rejected event. tally audit verify then accepts the
// three files.
func TestExportMatchesSchemas(t *testing.T) {
	t.Parallel()
	sch := loadLineSchemas(t)
	dir := t.TempDir()
	skey, vkey := filepath.Join(dir, "log.key"), filepath.Join(dir, "verifier.key")
	gen := offline(t, "", "log", "key", "generate", "--name", "tally.test", "--out", skey)
	if gen.code != ExitOK {
		t.Fatalf("log key generate: %+v", gen)
	}
	write(t, vkey, gen.stdout)

	// Poll lunch, with three votes waiting in the stream; poll dinner, made
	// as a user makes one; votes imported into both.
	f := newStreamFixture(t, "u1", "u2", "u3")
	if r := tally(t, f.db.URL, "poll", "create", "dinner", "--title", "Dinner?", "--choice", "soup", "--choice", "salad"); r.code != ExitOK {
		t.Fatalf("poll create dinner: %+v", r)
	}
	importLines(t, f.db.URL,
		`{"event_id":"d1","poll_id":"dinner","candidate_id":"soup","principal_id":"u1"}`,
		`{"event_id":"l4","poll_id":"lunch","candidate_id":"pizza","principal_id":"u4"}`,
		`{"event_id":"d2","poll_id":"dinner","candidate_id":"salad","principal_id":"u2"}`,
		`{"event_id":"d3","poll_id":"dinner","candidate_id":"soup","principal_id":"u3"}`,
		`{"event_id":"rejected-twice","poll_id":"dinner","candidate_id":"salad","principal_id":"u1"}`,
		`{"event_id":"rejected-choice","poll_id":"dinner","candidate_id":"tacos","principal_id":"u5"}`,
	)
	daemonURL := testenv.DaemonLogin(t, f.db)
	log := f.runProjector([]string{"--log-key", skey, "--checkpoint-interval", "20ms", "--batch-wait", "10ms",
		"--consumer", "cli-schema", "--database-url", daemonURL, "--redis-url", testenv.RedisURL(),
		"--stream-prefix", f.prefix, "--log-format", "text"},
		func() bool {
			heads, err := f.store.UnsignedHeads(f.ctx)
			return f.rdb.XLen(f.ctx, f.keys.Stream(0)).Val() == 0 && err == nil && len(heads) == 0
		})

	results := filepath.Join(dir, "results.jsonl")
	write(t, results, fetchResults(t, f, daemonURL, "lunch", "dinner"))

	// Past the checkpoints: two more votes, and a row in no leaf.
	importLines(t, f.db.URL,
		`{"event_id":"d6","poll_id":"dinner","candidate_id":"salad","principal_id":"u6"}`,
		`{"event_id":"l7","poll_id":"lunch","candidate_id":"pizza","principal_id":"u7"}`,
	)
	if _, err := f.db.Pool.Exec(f.ctx, `INSERT INTO poll_events (poll_id, candidate_id, principal_id, client_event_id, fingerprint, received_at)
		VALUES ('dinner', 'soup', 'u8', 'behind', '\x00', now())`); err != nil {
		t.Fatalf("insert a row behind the append's back: %v", err)
	}

	export, cps := filepath.Join(dir, "export.jsonl"), filepath.Join(dir, "checkpoints.jsonl")
	if r := tally(t, f.db.URL, "export", export, "--checkpoints", cps); r.code != ExitOK {
		t.Fatalf("export --checkpoints: %+v", r)
	}
	checkExportLines(t, sch.export, export)
	if n := eachFileLine(t, cps, func(line string, n int) {
		if err := validateLine(sch.checkpoint, line); err != nil {
			t.Errorf("checkpoints line %d is not valid against docs/checkpoint-line.schema.json: %v\n%s", n, err, line)
		}
	}); n < 2 {
		t.Fatalf("the checkpoints file holds %d lines, want at least one per poll; the projector's log:\n%s", n, log)
	}
	eachFileLine(t, results, func(line string, n int) {
		if err := validateLine(sch.results, line); err != nil {
			t.Errorf("results line %d is not valid against docs/results-line.schema.json: %v\n%s", n, err, line)
		}
	})

	r := offline(t, "", "audit", "verify", "--export", export, "--checkpoints", cps, "--key", vkey, "--results", results)
	if r.code != ExitOK || !strings.Contains(r.stdout, "OK: 10 events and 2 definitions in 2 polls") ||
		!strings.Contains(r.stdout, "3 of the 12 leaves are past the largest checkpoint of their poll") {
		t.Fatalf("audit verify of the export, its checkpoints and the results intake answered: %+v", r)
	}
}

// importLines imports the lines with tally import, one event per
// transaction, so that the polls' appends interleave.
func importLines(t *testing.T, dbURL string, lines ...string) {
	t.Helper()
	in := filepath.Join(t.TempDir(), "in.jsonl")
	write(t, in, strings.Join(lines, "\n")+"\n")
	if r := tally(t, dbURL, "import", in, "--batch-size", "1"); r.code != ExitOK {
		t.Fatalf("import: %+v", r)
	}
}

// fetchResults runs tally intake and returns what GET
// /v1/polls/{poll_id}/results answers for each poll, the answers one
// after another, as a user saves them for tally audit verify --results.
func fetchResults(t *testing.T, f streamFixture, daemonURL string, polls ...string) string {
	t.Helper()
	keyFile := credentialKeyFile(t)
	_, token := signedToken(t, f.store, keyFile, "reader")
	addr, err := testenv.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	stop := startDaemon(t, []string{"intake", "--listen", addr, "--database-url", daemonURL, "--redis-url", testenv.RedisURL(), "--credential-key", keyFile,
		"--stream-prefix", f.prefix, "--log-format", "json"})
	defer stop()
	client := apiClient(t)
	var out strings.Builder
	for _, poll := range polls {
		req, _ := http.NewRequest("GET", "http://"+addr+"/v1/polls/"+poll+"/results", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		var resp *http.Response
		testenv.Eventually(t, 15*time.Second, "intake to answer GET the results of "+poll, func() (err error) {
			resp, err = client.Do(req) // fails while intake is starting
			return err
		})
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET the results of %s: %s %s (%v)", poll, resp.Status, body, err)
		}
		out.Write(body)
	}
	return out.String()
}

// checkExportLines checks the export at path, as TestExportMatchesSchemas
// says.
func checkExportLines(t *testing.T, s *jsonschema.Schema, path string) {
	t.Helper()
	next := map[string]int64{} // each poll's next leaf index
	var inNoLeaf []string
	n := eachFileLine(t, path, func(line string, n int) {
		if err := validateLine(s, line); err != nil {
			t.Errorf("export line %d is not valid against docs/export-line.schema.json: %v\n%s", n, err, line)
		}
		row, err := audit.ParseExportLine([]byte(line))
		if err != nil {
			t.Fatalf("export line %d: %v", n, err)
		}
		if again := string(audit.AppendExportLine(nil, row)); again != line+"\n" {
			t.Errorf("export line %d is not the bytes audit.AppendExportLine writes for its row:\n%s\nwant\n%s", n, line, again)
		}
		if strings.HasPrefix(row.EventID, "rejected") {
			t.Errorf("export line %d is a rejected event: %s", n, line)
		}
		switch {
		case row.LeafIndex == nil:
			inNoLeaf = append(inNoLeaf, row.EventID)
		case len(inNoLeaf) > 0:
			t.Errorf("export line %d, a row in a leaf, follows a row in none", n)
		case *row.LeafIndex != next[row.PollID]:
			t.Errorf("export line %d is leaf %d of poll %s, want %d: each poll's rows in leaf order", n, *row.LeafIndex, row.PollID, next[row.PollID])
		default:
			next[row.PollID]++
		}
	})
	if n != 12 || next["lunch"] != 6 || next["dinner"] != 5 || fmt.Sprint(inNoLeaf) != "[behind]" {
		t.Fatalf("export: %d lines, leaves %v, rows in no leaf %v; want 12 lines: lunch's 6 leaves, dinner's 5 (each a definition and votes), "+
			"and the row behind the append's back", n, next, inNoLeaf)
	}
}

// The example lines of docs/audit.md, "The export".
const (
	docExportLine = `{"seq":42,"event_id":"e-1","poll_id":"lunch","candidate_id":"soup","principal_id":"p_7",` +
		`"received_at":"2026-12-02T06:00:00.000120Z","recorded_at":"2026-12-02T06:00:01.000000Z","leaf_index":3}`
	docDefinitionLine = `{"kind":"definition","poll_id":"lunch","title":"Lunch?","opens_at":"2026-03-01T12:00:00.000000Z",` +
		`"closes_at":"2026-03-01T13:00:00.000000Z","choices":["soup","salad"],"recorded_at":"2026-03-01T11:59:00.000000Z","leaf_index":0}`
	docCheckpointLine = `{"poll_id":"lunch","size":1,"checkpoint":"tally.example.org/polls/lunch\n1\nKng85plpqXgZCFHhpsAGFkgNupL0RFSXUB1d/o4Bap8=\n\n` +
		`— tally.example.org QaHfXmZjbyvZeKOl9tGO1RnNc9SDvn2UFCPIAbeC+u/oZ7hsBacN7ILZXGUr+rIXFJxpPrX7atLwpRpN6LJ+HkP5NwU=\n"}`
	docResultsLine = `{"poll_id":"lunch","results":[{"candidate_id":"soup","votes":1}],"total":1,"tree_size":1,"as_of":"2026-03-01T12:00:05.123456Z"}`
)

// TestDocExampleLines: the example lines docs/audit.md gives are in it,
// valid against the schemas and read by the readers; the export line is
// the one audit.AppendExportLine writes for its row.
func TestDocExampleLines(t *testing.T) {
	t.Parallel()
	sch := loadLineSchemas(t)
	doc, err := os.ReadFile(filepath.Join("..", "docs", "audit.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, line string
		schema     *jsonschema.Schema
		read       func(line string) error
	}{
		{"export", docExportLine, sch.export, readExportLine},
		{"definition", docDefinitionLine, sch.export, readExportLine},
		{"checkpoints", docCheckpointLine, sch.checkpoint, readCheckpointLine},
		{"results", docResultsLine, sch.results, readResultsLine},
	} {
		if !strings.Contains(string(doc), "\n"+tc.line+"\n") {
			t.Errorf("docs/audit.md does not give the %s line %s", tc.name, tc.line)
		}
		if err := validateLine(tc.schema, tc.line); err != nil {
			t.Errorf("the %s line of docs/audit.md is not valid against its schema: %v", tc.name, err)
		}
		if err := tc.read(tc.line); err != nil {
			t.Errorf("the %s line of docs/audit.md is refused: %v", tc.name, err)
		}
	}
}

// readExportLine reads line as an export line, which must be the bytes
// audit.AppendExportLine writes for what it reads.
func readExportLine(line string) error {
	row, err := audit.ParseExportLine([]byte(line))
	if err == nil && string(audit.AppendExportLine(nil, row)) != line+"\n" {
		err = fmt.Errorf("audit.AppendExportLine writes its row as %s", audit.AppendExportLine(nil, row))
	}
	return err
}

// readCheckpointLine reads line as a checkpoints file of one line.
func readCheckpointLine(line string) error {
	_, err := audit.ReadCheckpoints(strings.NewReader(line + "\n"))
	return err
}

// readResultsLine reads line as a results file of one line.
func readResultsLine(line string) error {
	_, err := audit.ReadResults(strings.NewReader(line + "\n"))
	return err
}

// schemaCase is a hand-written line: whether the reader and the schema
// accept it. A line the reader refuses and the schema accepts is one of
// what docs/audit.md says a schema cannot say.
type schemaCase struct {
	name, line     string
	reader, schema bool
}

// TestSchemasAgreeWithReaders: the schemas accept and refuse the lines
// the readers do, but for a key given twice, a whole number written 1.0
// or 1e3, and a definition that closes before it opens, which the readers
// alone refuse.
func TestSchemasAgreeWithReaders(t *testing.T) {
	t.Parallel()
	sch := loadLineSchemas(t)
	const ids = `"event_id":"e","poll_id":"p","candidate_id":"c","principal_id":"u"`
	const def = `"kind":"definition","poll_id":"p","title":"Lunch?","opens_at":"2026-12-02T07:00:00.000000Z","choices":["a","b"]`
	at := func(time string) string { return `{` + ids + `,"received_at":"` + time + `"}` }
	export := []schemaCase{
		{"the four ids alone", `{` + ids + `}`, true, true},
		{"an offset and four fractional digits", at("2026-12-02T08:00:00.8654+01:00"), true, true},
		{"no fractional digits", at("2026-12-02T07:00:00Z"), true, true},
		{"six fractional digits", at("2026-12-02T07:00:00.123456Z"), true, true},
		{"nulls for absent", `{` + ids + `,"received_at":null,"recorded_at":null,"leaf_index":null}`, true, true},
		{"the largest seq and leaf index", `{"seq":9223372036854775807,` + ids + `,"leaf_index":9223372036854775807}`, true, true},
		{"leaf index 0", `{` + ids + `,"leaf_index":0}`, true, true},
		{"the fields in another order", `{"principal_id":"u","candidate_id":"c","poll_id":"p","event_id":"e","seq":1}`, true, true},

		{"an unknown key", `{` + ids + `,"kind":"definition"}`, false, false},
		{"a key in another case", `{"event_id":"e","Poll_ID":"p","candidate_id":"c","principal_id":"u"}`, false, false},
		{"a key in another case beside the key", `{` + ids + `,"Candidate_ID":"d"}`, false, false},
		{"7 fractional digits", at("2026-12-02T07:00:00.1234567Z"), false, false},
		{"9 fractional digits", at("2026-12-02T07:00:00.123456789Z"), false, false},
		{"a '.' without digits", at("2026-12-02T07:00:00.Z"), false, false},
		{"a lower-case t", at("2026-12-02t07:00:00Z"), false, false},
		{"an offset without a colon", at("2026-12-02T08:00:00+0100"), false, false},
		{"no offset", at("2026-12-02T07:00:00"), false, false},
		{"a date that does not exist", at("2023-02-29T07:00:00Z"), false, false},
		{"hour 24", at("2026-12-02T24:00:00Z"), false, false},
		{"second 60", at("2026-12-02T23:59:60Z"), false, false},
		{"Go's zero time", at("0001-01-01T00:00:00Z"), false, false},
		{"a time as a number", `{` + ids + `,"received_at":5}`, false, false},
		{"an id with '/'", `{"event_id":"e/1","poll_id":"p","candidate_id":"c","principal_id":"u"}`, false, false},
		{"an id of 65 characters", `{"event_id":"` + strings.Repeat("e", 65) + `","poll_id":"p","candidate_id":"c","principal_id":"u"}`, false, false},
		{"an empty id", `{"event_id":"","poll_id":"p","candidate_id":"c","principal_id":"u"}`, false, false},
		{"a null id", `{"event_id":null,"poll_id":"p","candidate_id":"c","principal_id":"u"}`, false, false},
		{"no principal_id", `{"event_id":"e","poll_id":"p","candidate_id":"c"}`, false, false},
		{"seq 0", `{"seq":0,` + ids + `}`, false, false},
		{"a null seq", `{"seq":null,` + ids + `}`, false, false},
		{"seq 2^63", `{"seq":9223372036854775808,` + ids + `}`, false, false},
		{"leaf index -1", `{` + ids + `,"leaf_index":-1}`, false, false},
		{"a leaf index as a string", `{` + ids + `,"leaf_index":"3"}`, false, false},
		{"not an object", `[` + ids + `]`, false, false},

		{"a key given twice", `{` + ids + `,"candidate_id":"d"}`, false, true},
		{"seq 1.0", `{"seq":1.0,` + ids + `}`, false, true},
		{"leaf index 1e3", `{` + ids + `,"leaf_index":1e3}`, false, true},

		{"a definition", `{` + def + `}`, true, true},
		{"a definition with every field", `{` + def + `,"closes_at":"2026-12-02T09:00:00.000000Z","eligible_hash":"` + strings.Repeat("0a", 32) +
			`","recorded_at":"2026-12-02T07:00:00.000001Z","leaf_index":0}`, true, true},
		{"a definition's fields in another order", `{"choices":["a"],"opens_at":"2026-12-02T07:00:00Z","title":"T","poll_id":"p","kind":"definition"}`, true, true},
		{"a kind this version does not know", `{"kind":"amendment","poll_id":"p","title":"T","opens_at":"2026-12-02T07:00:00Z","choices":["a"]}`, false, false},
		{"a definition without a title", `{"kind":"definition","poll_id":"p","opens_at":"2026-12-02T07:00:00Z","choices":["a"]}`, false, false},
		{"an empty title", `{"kind":"definition","poll_id":"p","title":"","opens_at":"2026-12-02T07:00:00Z","choices":["a"]}`, false, false},
		{"no choice", `{"kind":"definition","poll_id":"p","title":"T","opens_at":"2026-12-02T07:00:00Z","choices":[]}`, false, false},
		{"a choice twice", `{"kind":"definition","poll_id":"p","title":"T","opens_at":"2026-12-02T07:00:00Z","choices":["a","a"]}`, false, false},
		{"a choice with '/'", `{"kind":"definition","poll_id":"p","title":"T","opens_at":"2026-12-02T07:00:00Z","choices":["a/b"]}`, false, false},
		{"an eligible hash in capitals", `{` + def + `,"eligible_hash":"` + strings.Repeat("0A", 32) + `"}`, false, false},
		{"a vote's field in a definition", `{` + def + `,"candidate_id":"a"}`, false, false},
		{"a definition that closes before it opens", `{` + def + `,"closes_at":"2026-12-01T07:00:00Z"}`, false, true},
	}
	parse := func(line string) error { _, err := audit.ParseExportLine([]byte(line)); return err }
	checkCases(t, "export", sch.export, parse, export)

	const note = `"checkpoint":"tally.test/polls/p\n1\nKng85plpqXgZCFHhpsAGFkgNupL0RFSXUB1d/o4Bap8=\n\n— tally.test QaHfXmZjbyvZ\n"`
	checkCases(t, "checkpoints", sch.checkpoint, readCheckpointLine, []schemaCase{
		{"a stored checkpoint", `{"poll_id":"p","size":1,` + note + `}`, true, true},
		{"a key the file does not have", `{"poll_id":"p","size":1,` + note + `,"signed_at":"2026-12-02T07:00:00Z"}`, false, false},
		{"a negative size", `{"poll_id":"p","size":-1,` + note + `}`, false, false},
		{"a size as a string", `{"poll_id":"p","size":"1",` + note + `}`, false, false},
		{"an invalid poll id", `{"poll_id":"p q","size":1,` + note + `}`, false, false},
		{"no checkpoint", `{"poll_id":"p","size":1}`, false, false},
	})

	const counts = `"results":[{"candidate_id":"a","votes":2},{"candidate_id":"b","votes":0}],"total":2`
	checkCases(t, "results", sch.results, readResultsLine, []schemaCase{
		{"an answer of GET results", `{"poll_id":"p",` + counts + `,"tree_size":2,"as_of":"2026-12-02T07:00:00.123456789Z"}`, true, true},
		{"a stale answer", `{"poll_id":"p",` + counts + `,"tree_size":2,"as_of":"2026-12-02T07:00:00Z","stale":true}`, true, true},
		{"no tree size", `{"poll_id":"p",` + counts + `}`, true, true},
		{"a null tree size", `{"poll_id":"p",` + counts + `,"tree_size":null}`, true, true},
		{"a key the reader does not know", `{"poll_id":"p",` + counts + `,"note":"x"}`, true, true},
		{"a key read, in another case", `{"poll_id":"p",` + counts + `,"Total":3}`, false, false},
		{"an entry's key in another case", `{"poll_id":"p","results":[{"candidate_id":"a","votes":2,"Votes":2}],"total":2}`, false, false},
		{"an invalid poll id", `{"poll_id":"p q",` + counts + `}`, false, false},
		{"votes as a string", `{"poll_id":"p","results":[{"candidate_id":"a","votes":"2"}],"total":2}`, false, false},
		{"a key given twice", `{"poll_id":"p",` + counts + `,"total":2}`, false, true},
	})
}

// checkCases checks each case against the reader read and the schema s of
// the file named file.
func checkCases(t *testing.T, file string, s *jsonschema.Schema, read func(line string) error, cases []schemaCase) {
	t.Helper()
	for _, tc := range cases {
		if err := read(tc.line); (err == nil) != tc.reader {
			t.Errorf("%s line, %s: the reader says %v, want accepted %v\n%s", file, tc.name, err, tc.reader, tc.line)
		}
		if err := validateLine(s, tc.line); (err == nil) != tc.schema {
			t.Errorf("%s line, %s: the schema says %v, want valid %v\n%s", file, tc.name, err, tc.schema, tc.line)
		}
	}
}
