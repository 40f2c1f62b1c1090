package audit_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"tally/audit"
)

// compileSchema compiles one of the JSON Schemas of docs/, format
// asserted.
func compileSchema(t *testing.T, name string) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	s, err := c.Compile(filepath.Join("..", "docs", name))
	if err != nil {
		t.Fatalf("compile docs/%s: %v", name, err)
	}
	return s
}

func validate(s *jsonschema.Schema, line string) error {
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(line))
	if err != nil {
		return err
	}
	return s.Validate(v)
}

// The lines of ballots and of definitions with rules that the readers
// take are valid against the schemas, and the schemas refuse what the
// readers refuse, but for what they cannot say (the canonical form of a
// ballot, a key given twice, which figures a kind's results carry).
func TestBallotLinesAgainstSchemas(t *testing.T) {
	export := compileSchema(t, "export-line.schema.json")
	results := compileSchema(t, "results-line.schema.json")
	const ids = `"event_id":"e","poll_id":"p","principal_id":"u"`
	const def = `"kind":"definition","poll_id":"p","title":"T","opens_at":"2026-12-02T07:00:00.000000Z","choices":["a","b","c"]`
	for _, tc := range []struct {
		line  string
		valid bool
	}{
		{`{` + ids + `,"ballot":["a","c"]}`, true},
		{`{` + ids + `,"ballot":{"a":"yes","b":"abstain"}}`, true},
		{`{` + ids + `,"ballot":{"a":3,"b":0}}`, true},
		{`{` + ids + `,"ballot":[]}`, true},
		{`{` + def + `,"ballot":{"kind":"multiple","min_choices":0,"max_choices":2},"answers":"final"}`, true},
		{`{` + def + `,"ballot":{"kind":"score","max_score":5,"budget":6},"answers":"latest"}`, true},
		{`{` + def + `,"ballot":{"kind":"score","max_score":5},"answers":"final"}`, true},
		{`{` + def + `,"ballot":{"kind":"ranked"},"answers":"latest"}`, true},
		{`{` + def + `,"ballot":{"kind":"single"},"answers":"latest"}`, true},
		{`{` + ids + `,"ballot":"a"}`, false},
		{`{` + ids + `,"candidate_id":"a","ballot":["a"]}`, false},
		{`{` + ids + `}`, false},
		{`{` + ids + `,"ballot":{"a":"Yes"}}`, false},
		{`{` + ids + `,"ballot":{"a":-1}}`, false},
		{`{` + ids + `,"ballot":[1]}`, false},
		{`{` + def + `,"ballot":{"kind":"single"},"answers":"final"}`, false},
		{`{` + def + `,"ballot":{"kind":"ranked"}}`, false},
		{`{` + def + `,"answers":"latest"}`, false},
		{`{` + def + `,"ballot":{"kind":"ranked","max_score":3},"answers":"final"}`, false},
		{`{` + def + `,"ballot":{"kind":"multiple","max_choices":2},"answers":"final"}`, false},
		{`{` + def + `,"ballot":{"kind":"score","max_score":5,"budget":0},"answers":"final"}`, false},
		{`{` + def + `,"ballot":{"kind":"borda"},"answers":"final"}`, false},
		{`{` + def + `,"ballot":{"kind":"ranked"},"answers":"last"}`, false},
	} {
		err := validate(export, tc.line)
		if (err == nil) != tc.valid {
			t.Errorf("%s: schema says %v, want valid %v", tc.line, err, tc.valid)
		}
		_, err = audit.ParseExportLine([]byte(tc.line))
		if (err == nil) != tc.valid {
			t.Errorf("%s: reader says %v, want valid %v", tc.line, err, tc.valid)
		}
	}
	for _, tc := range []struct {
		line  string
		valid bool
	}{
		{`{"poll_id":"p","results":[{"candidate_id":"a","votes":2,"borda":2},{"candidate_id":"b","votes":0,"borda":0}],"total":2,"ballots":2,"pairwise":{"a":{"b":2},"b":{"a":0}},"condorcet_winner":"a"}`, true},
		{`{"poll_id":"p","results":[{"candidate_id":"a","votes":1,"yes":1,"no":0,"abstain":2}],"total":1,"ballots":3}`, true},
		{`{"poll_id":"p","results":[{"candidate_id":"a","votes":1,"score":7}],"total":1,"ballots":1,"condorcet_winner":null}`, true},
		{`{"poll_id":"p","results":[{"candidate_id":"a","votes":1,"Score":7}],"total":1}`, false},
		{`{"poll_id":"p","results":[],"total":0,"Ballots":1}`, false},
		{`{"poll_id":"p","results":[],"total":0,"pairwise":{"a":{"b":"1"}}}`, false},
		{`{"poll_id":"p","results":[],"total":0,"condorcet_winner":"a b"}`, false},
	} {
		err := validate(results, tc.line)
		if (err == nil) != tc.valid {
			t.Errorf("%s: schema says %v, want valid %v", tc.line, err, tc.valid)
		}
		_, err = audit.ReadResults(strings.NewReader(tc.line))
		if (err == nil) != tc.valid {
			t.Errorf("%s: reader says %v, want valid %v", tc.line, err, tc.valid)
		}
	}
}
