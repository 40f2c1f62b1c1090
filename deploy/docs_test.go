package deploy

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

const docsFile = "../docs/dashboards.md"

// anchor is the fragment GitHub gives a Markdown heading: lower case,
// punctuation other than - and _ dropped, spaces made hyphens.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestAnchor(t *testing.T) {
	t.Parallel()
	for heading, want := range map[string]string{
		"The idempotency window, and what a missing record costs": "the-idempotency-window-and-what-a-missing-record-costs",
		"A projector crashes (kill -9, OOM, node lost)":           "a-projector-crashes-kill--9-oom-node-lost",
		"Lost entries (`tally_projector_lost_total` above 0)":     "lost-entries-tally_projector_lost_total-above-0",
		"What a client sees: the 503 problem types of a vote":     "what-a-client-sees-the-503-problem-types-of-a-vote",
		"TallyBacklogGrowing":                                     "tallybackloggrowing",
	} {
		if got := anchor(heading); got != want {
			t.Errorf("anchor(%q) = %q, want %q", heading, got, want)
		}
	}
}

// headings returns the anchors of the Markdown headings of a file,
// outside code blocks.
func headings(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	inCode := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
			continue
		}
		if rest, ok := strings.CutPrefix(line, "#"); ok && !inCode {
			out = append(out, anchor(strings.TrimSpace(strings.TrimLeft(rest, "#"))))
		}
	}
	return out
}

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocsLinks checks every relative link of docs/dashboards.md: the file
// exists, and the heading it points at too.
func TestDocsLinks(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(docsFile)
	if err != nil {
		t.Fatal(err)
	}
	links := mdLink.FindAllStringSubmatch(string(b), -1)
	if len(links) == 0 {
		t.Fatalf("%s has no links", docsFile)
	}
	for _, m := range links {
		target := m[1]
		if strings.Contains(target, "://") {
			continue
		}
		path, frag, _ := strings.Cut(target, "#")
		file := docsFile
		if path != "" {
			file = filepath.Join(filepath.Dir(docsFile), path)
		}
		if _, err := os.Stat(file); err != nil {
			t.Errorf("link %s: %v", target, err)
			continue
		}
		if frag != "" && !slices.Contains(headings(t, file), frag) {
			t.Errorf("link %s: %s has no heading with the anchor %q", target, file, frag)
		}
	}
}

// TestDocsAlerts checks that every alert has its section in
// docs/dashboards.md, where its runbook annotation points, and that the
// page describes no alert that is not in the rules.
func TestDocsAlerts(t *testing.T) {
	t.Parallel()
	anchors := headings(t, docsFile)
	var alerts []string
	for _, r := range loadRules(t) {
		a := strings.ToLower(r.Alert)
		alerts = append(alerts, a)
		if !slices.Contains(anchors, a) {
			t.Errorf("alert %s has no section in %s", r.Alert, docsFile)
		}
	}
	for _, a := range anchors {
		if strings.HasPrefix(a, "tally") && !slices.Contains(alerts, a) {
			t.Errorf("%s has a section #%s, but no alert of that name is in %s", docsFile, a, rulesFile)
		}
	}
}
