package live

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"tally/ledger"
	"tally/vote"
)

// This file tests the live page of each ballot kind as the server renders
// it (what a reader without JavaScript sees): figures counted with
// vote.Count from ballots, as the projection counts them.

// pageOf renders the page of a poll of spec with choices a, b, c and the
// ballots (canonical forms) counted.
func pageOf(t *testing.T, spec vote.Spec, ballots ...string) string {
	t.Helper()
	choices := []string{"a", "b", "c"}
	rules, err := vote.NewRules(spec, len(choices))
	if err != nil {
		t.Fatal(err)
	}
	c := vote.NewCount(rules.Kind, choices)
	for _, s := range ballots {
		b, err := vote.ParseCanonical(rules.Kind, s)
		if err != nil {
			t.Fatal(err)
		}
		if err := rules.Check(choices, b); err != nil {
			t.Fatal(err)
		}
		c.Add(b, 1)
	}
	now := time.Now()
	p := ledger.Poll{ID: "k", Title: "Kinds", OpensAt: now.Add(-time.Hour), Choices: choices, Rules: rules}
	res := ledger.ResultsOf("k", c)
	res.AsOf = now
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, newPageData(p, res, false, 0, now)); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func wantInPage(t *testing.T, page string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(page, p) {
			t.Errorf("the page lacks %q:\n%s", p, page)
		}
	}
}

// TestPageApprove: each choice shows its yes, no and abstain, and a bar
// stacked of their shares.
func TestPageApprove(t *testing.T) {
	page := pageOf(t, vote.Spec{Kind: "approve"}, `{"a":"yes","b":"no"}`, `{"a":"yes","b":"abstain","c":"no"}`, `{"a":"no"}`, `{"a":"abstain"}`)
	wantInPage(t, page, `data-kind="approve"`,
		`<span class="yes-count">2</span> yes · <span class="no-count">1</span> no · <span class="abstain-count">1</span> abstain`,
		`<div class="fill yes" style="width: 50.0%"></div><div class="fill no" style="width: 25.0%"></div><div class="fill abstain" style="width: 25.0%"></div>`,
		`<strong id="ballots">4</strong> <span id="ballots-unit">ballots</span>`)
}

// TestPageScore: each choice shows its mean score beside its votes, the
// bar the mean's share of max_score; a choice nobody scored shows no mean.
func TestPageScore(t *testing.T) {
	page := pageOf(t, vote.Spec{Kind: "score", MaxScore: intp(4)}, `{"a":4,"b":1}`, `{"a":1}`, `{"a":2}`)
	wantInPage(t, page, `data-max-score="4"`,
		`mean <span class="mean">2.33</span> of 4, <span class="count">3</span> <span class="unit">votes</span>`,
		`<div class="fill" style="width: 58.3%">`, // 7 of 12
		`mean <span class="mean">1.00</span> of 4, <span class="count">1</span> <span class="unit">vote</span>`,
		`mean <span class="mean">–</span> of 4, <span class="count">0</span>`)
}

// TestPageRanked: the choices are listed by Borda count with their first
// preferences, and the Condorcet winner is named, or its absence said.
func TestPageRanked(t *testing.T) {
	page := pageOf(t, vote.Spec{Kind: "ranked"}, `["c","a"]`, `["c","b","a"]`, `["a","c"]`)
	wantInPage(t, page, `Condorcet winner: c (beats every other choice head to head).`,
		`Borda <span class="borda">5</span>, first preferences <span class="count">2</span>`)
	if ic, ia, ib := strings.Index(page, `data-candidate="c"`), strings.Index(page, `data-candidate="a"`), strings.Index(page, `data-candidate="b"`); !(ic < ia && ia < ib) {
		t.Errorf("choices not in Borda order c (5), a (3), b (1):\n%s", page)
	}
	cycle := pageOf(t, vote.Spec{Kind: "ranked"}, `["a","b","c"]`, `["b","c","a"]`, `["c","a","b"]`)
	wantInPage(t, cycle, "No Condorcet winner")
}

// TestPageMultiple: a share is of the ballots, not of the votes.
func TestPageMultiple(t *testing.T) {
	page := pageOf(t, vote.Spec{Kind: "multiple"}, `["a","b"]`, `["a"]`)
	wantInPage(t, page, `<span class="count">2</span> <span class="unit">votes</span>, <span class="share">100.0%</span>`,
		`<span class="count">1</span> <span class="unit">vote</span>, <span class="share">50.0%</span>`,
		`<strong id="ballots">2</strong> <span id="ballots-unit">ballots</span>`)
}

func intp(n int) *int { return &n }

// TestPageSaysClosedOnlyWhenClosed: the page's line on the log says the
// poll's question was closed only for a poll that is.
func TestPageSaysClosedOnlyWhenClosed(t *testing.T) {
	now := time.Now()
	later, earlier := now.Add(time.Hour), now.Add(-time.Minute)
	for _, tc := range []struct {
		name     string
		closesAt *time.Time
		want     string
	}{
		{"open", nil, "as it was asked."},
		{"open, closes later", &later, "as it was asked."},
		{"closed", &earlier, "as it was asked and closed."},
	} {
		p := ledger.Poll{ID: "c", Title: "Closing", OpensAt: now.Add(-time.Hour), ClosesAt: tc.closesAt, Choices: []string{"a"}}
		var buf bytes.Buffer
		if err := pageTemplate.Execute(&buf, newPageData(p, ledger.Results{}, false, 0, now)); err != nil {
			t.Fatal(err)
		}
		page := buf.String()
		if !strings.Contains(page, tc.want) || strings.Contains(page, "(and closed)") {
			t.Errorf("%s poll: the page's log line lacks %q (or says \"(and closed)\"):\n%s", tc.name, tc.want, page)
		}
	}
}
