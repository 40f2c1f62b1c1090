package cli

import (
	"bytes"
	"encoding/json"
	"flag"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"tally/audit"
)

// This file owns the conformance vectors' tests: that the files committed
// in testdata/conformance are what their generator writes
// (TestConformanceVectorsUpToDate; -update-vectors rewrites them), and
// that tally audit, run as a user runs it, gives every case of the
// manifest its verdict (TestConformanceVectors). The manifest's form is
// here too; the generator is conformance_vectors_test.go.

var updateVectors = flag.Bool("update-vectors", false, "rewrite testdata/conformance from its generator (TestConformanceVectorsUpToDate)")

// conformanceDir is testdata/conformance at the repository's root.
const conformanceDir = "../testdata/conformance"

// vectorManifest is vectors.json.
type vectorManifest struct {
	About   string       `json:"about"`
	Log     string       `json:"log"`      // the log name of the key
	KeySeed string       `json:"key_seed"` // the key's Ed25519 seed is SHA-256 of this text
	Cases   []vectorCase `json:"cases"`
}

// vectorCase is one case: a command on files, and its verdict.
type vectorCase struct {
	Name    string      `json:"name"`
	About   string      `json:"about"`
	Command string      `json:"command"` // verify or receipt
	Files   vectorFiles `json:"files"`
	Exit    int         `json:"exit"`
	// Fields are the distinct Discrepancy.Field values found, for exit 1
	// of verify (a checkpoint's root that differs has none).
	Fields *[]string `json:"fields,omitempty"`
	// Discrepancies are those tally reports, in its order, without their
	// detail.
	Discrepancies []vectorDiscrepancy `json:"discrepancies,omitempty"`
	// BeforeDefinitions are, for verify, the polls named with
	// --before-definitions: the first ledger's, whose logs are from
	// before definitions were logged.
	BeforeDefinitions []string `json:"before_definitions,omitempty"`
	// ErrorContains are phrases of the error: standard error for exit 2,
	// the REFUSED line for exit 1 of receipt.
	ErrorContains []string `json:"error_contains,omitempty"`
}

// vectorFiles are the files of a case, relative to testdata/conformance:
// for verify, --export, --checkpoints, --key, --results and --eligible; for receipt,
// the receipt, --key and, together, --checkpoint and --consistency.
type vectorFiles struct {
	Export      string `json:"export,omitempty"`
	Checkpoints string `json:"checkpoints,omitempty"`
	Key         string `json:"key"`
	Results     string `json:"results,omitempty"`
	Receipt     string `json:"receipt,omitempty"`
	Checkpoint  string `json:"checkpoint,omitempty"`
	Consistency string `json:"consistency,omitempty"`
	// Eligible are, for verify, the eligible lists given, by poll:
	// --eligible POLL=FILE each.
	Eligible map[string]string `json:"eligible,omitempty"`
}

// vectorDiscrepancy is an audit.Discrepancy without its detail.
type vectorDiscrepancy struct {
	PollID         string           `json:"poll_id"`
	Leaves         *audit.LeafRange `json:"leaves,omitempty"`
	Field          string           `json:"field,omitempty"`
	ExportLine     int              `json:"export_line,omitempty"`
	CheckpointLine int              `json:"checkpoint_line,omitempty"`
}

func TestConformanceVectorsUpToDate(t *testing.T) {
	files := conformanceVectors(t)
	if *updateVectors {
		writeVectors(t, files)
		return
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		got, err := os.ReadFile(filepath.Join(conformanceDir, name))
		if err != nil {
			t.Errorf("%v; go test ./cli -run TestConformanceVectorsUpToDate -update-vectors writes it", err)
			continue
		}
		if !bytes.Equal(got, files[name]) {
			t.Errorf("testdata/conformance/%s is not what the generator writes (first difference at byte %d); "+
				"if the change is meant, go test ./cli -run TestConformanceVectorsUpToDate -update-vectors rewrites it", name, firstDifference(got, files[name]))
		}
	}
	err := filepath.WalkDir(conformanceDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		name := filepath.ToSlash(strings.TrimPrefix(path, conformanceDir+string(filepath.Separator)))
		if _, ok := files[name]; !ok && name != "README.md" {
			t.Errorf("testdata/conformance/%s is not written by the generator; remove it, or -update-vectors does", name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func firstDifference(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// writeVectors replaces the generated files of testdata/conformance by
// files, tampered/ whole, so that a case removed leaves nothing behind.
func writeVectors(t *testing.T, files map[string][]byte) {
	if err := os.RemoveAll(filepath.Join(conformanceDir, "tampered")); err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		path := filepath.Join(conformanceDir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// ballotVectorsDir holds the ballot kinds' conformance vectors, which
// package audit generates (audit/conformance_ballots_test.go); tally audit
// verify runs them here as a user would, as it runs these.
const ballotVectorsDir = "../audit/testdata/conformance-ballots"

func TestConformanceVectors(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{conformanceDir, ballotVectorsDir} {
		b, err := os.ReadFile(filepath.Join(dir, vectorManifestFile))
		if err != nil {
			t.Fatal(err)
		}
		var m vectorManifest
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %v", vectorManifestFile, err)
		}
		if len(m.Cases) == 0 {
			t.Fatalf("%s lists no case", vectorManifestFile)
		}
		for _, c := range m.Cases {
			t.Run(filepath.Base(dir)+"/"+c.Name, func(t *testing.T) { runVector(t, dir, c) })
		}
	}
}

// runVector runs the case's command, its files in dir, as a user would
// and checks its exit code and what it names: the discrepancies of
// verify, the phrases of an error or a refusal.
func runVector(t *testing.T, dir string, c vectorCase) {
	path := func(p string) string { return filepath.Join(dir, filepath.FromSlash(p)) }
	var args []string
	switch c.Command {
	case "verify":
		args = []string{"audit", "verify", "--export", path(c.Files.Export), "--checkpoints", path(c.Files.Checkpoints),
			"--key", path(c.Files.Key), "--format", "json"}
		if c.Files.Results != "" {
			args = append(args, "--results", path(c.Files.Results))
		}
		for _, poll := range c.BeforeDefinitions {
			args = append(args, "--before-definitions", poll)
		}
		for _, poll := range slices.Sorted(maps.Keys(c.Files.Eligible)) {
			args = append(args, "--eligible", poll+"="+path(c.Files.Eligible[poll]))
		}
	case "receipt":
		args = []string{"audit", "receipt", path(c.Files.Receipt), "--key", path(c.Files.Key)}
		if c.Files.Checkpoint != "" {
			args = append(args, "--checkpoint", path(c.Files.Checkpoint), "--consistency", path(c.Files.Consistency))
		}
	default:
		t.Fatalf("command %q: the manifest knows verify and receipt", c.Command)
	}
	r := offline(t, "", args...)
	if r.code != c.Exit {
		t.Fatalf("tally %s: exit %d, want %d: %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, c.Exit, c.About, r.stdout, r.stderr)
	}
	switch {
	case c.Exit == ExitError:
		contains(t, "standard error", r.stderr, c.ErrorContains)
	case c.Command == "receipt" && c.Exit == ExitCheck:
		contains(t, "the REFUSED line", r.stdout, append([]string{"REFUSED:"}, c.ErrorContains...))
	case c.Command == "verify":
		checkDiscrepancies(t, c, r.stdout)
	}
}

func contains(t *testing.T, what, got string, phrases []string) {
	t.Helper()
	for _, p := range phrases {
		if !strings.Contains(got, p) {
			t.Errorf("%s does not say %q:\n%s", what, p, got)
		}
	}
}

// checkDiscrepancies compares the report's discrepancies with the case's:
// the same, in the same order, and the same fields.
func checkDiscrepancies(t *testing.T, c vectorCase, stdout string) {
	t.Helper()
	var rep audit.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("the report is not JSON: %v\n%s", err, stdout)
	}
	got := []vectorDiscrepancy{}
	fields := []string{}
	for _, d := range rep.Discrepancies {
		got = append(got, vectorDiscrepancy{d.PollID, d.Leaves, d.Field, d.ExportLine, d.CheckpointLine})
		if d.Field != "" && !slices.Contains(fields, d.Field) {
			fields = append(fields, d.Field)
		}
	}
	slices.Sort(fields)
	want := c.Discrepancies
	if want == nil {
		want = []vectorDiscrepancy{}
	}
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", "  ")
		w, _ := json.MarshalIndent(want, "", "  ")
		t.Errorf("%s: the discrepancies reported are not those expected\ngot:\n%s\nwant:\n%s\nreport:\n%s", c.About, g, w, stdout)
	}
	if c.Fields != nil && !slices.Equal(fields, *c.Fields) {
		t.Errorf("%s: fields %q, want %q", c.About, fields, *c.Fields)
	}
}
