package intake_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"tally/ledger"
	"tally/vote"
)

// appendBallots records ballots (canonical forms) of poll, each of its
// own principal, keys prefixed with key.
func appendBallots(t *testing.T, b *bundle, poll, key string, ballots ...string) {
	t.Helper()
	var events []ledger.Event
	for i, s := range ballots {
		events = append(events, ledger.EventOf(fmt.Sprintf("pr-%s%d", key, i), fmt.Sprintf("%s%d", key, i), poll, s, time.Now()))
	}
	outs, err := b.store.Append(context.Background(), events)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range outs {
		if o.Status != ledger.StatusRecorded {
			t.Fatalf("append %s: %v", ballots[i], o)
		}
	}
}

// The live page of each ballot kind in Chromium: the figures of the kind
// at load, and, as ballots are recorded, the page's script following the
// stream without a reload: approve's yes/no/abstain, score's mean, ranked's
// Borda order and Condorcet winner, multiple's count.
func TestLivePageKindsInBrowser(t *testing.T) {
	b := setup(t)
	ctx := browser(t)
	for _, tc := range []struct {
		spec           vote.Spec
		before, after  []string
		atLoad, follow string // JavaScript conditions on the page
	}{
		{vote.Spec{Kind: "approve"}, []string{`{"a":"yes","b":"no"}`}, []string{`{"a":"yes","c":"abstain"}`, `{"a":"no"}`},
			`document.querySelector('li[data-candidate="a"] .yes-count').textContent === "1"`,
			`document.querySelector('li[data-candidate="a"] .yes-count').textContent === "2" &&
			 document.querySelector('li[data-candidate="a"] .no-count').textContent === "1" &&
			 document.querySelector('li[data-candidate="c"] .abstain-count').textContent === "1"`},
		{vote.Spec{Kind: "score", MaxScore: new(5)}, []string{`{"a":5}`}, []string{`{"a":2,"b":1}`},
			`document.querySelector('li[data-candidate="a"] .mean').textContent === "5.00"`,
			`document.querySelector('li[data-candidate="a"] .mean').textContent === "3.50" &&
			 document.querySelector('li[data-candidate="b"] .mean').textContent === "1.00"`},
		{vote.Spec{Kind: "ranked"}, []string{`["a","b","c"]`}, []string{`["c","b"]`, `["c","a"]`},
			`document.querySelector('li.choice').dataset.candidate === "a" && document.getElementById("condorcet").textContent.includes("a")`,
			`document.querySelector('li.choice').dataset.candidate === "c" &&
			 document.querySelector('li[data-candidate="c"] .borda').textContent === "4" &&
			 document.getElementById("condorcet").textContent.includes("Condorcet winner: c")`},
		{vote.Spec{Kind: "multiple", MaxChoices: new(2)}, []string{`["a","b"]`}, []string{`["a"]`},
			`document.querySelector('li[data-candidate="a"] .count').textContent === "1"`,
			`document.querySelector('li[data-candidate="a"] .count').textContent === "2" &&
			 document.getElementById("ballots").textContent === "2"`},
	} {
		id := "k-" + tc.spec.Kind
		rules, err := vote.NewRules(tc.spec, 3)
		if err != nil {
			t.Fatal(err)
		}
		b.poll(t, ledger.Poll{ID: id, Title: "A poll of kind " + tc.spec.Kind, Choices: []string{"a", "b", "c"}, PublicResults: true, Rules: rules})
		appendBallots(t, b, id, id+"-before", tc.before...)
		if err := chromedp.Do(ctx, chromedp.Navigate(b.url+"/polls/"+id), chromedp.WaitVisible(chromedp.CSS(`#results`))); err != nil {
			t.Fatalf("%s: load the page: %v", id, err)
		}
		if !eval[bool](t, ctx, tc.atLoad) {
			t.Fatalf("%s: at load the page does not show %s", id, tc.atLoad)
		}
		_, err = chromedp.Run(ctx, chromedp.Poll[chromedp.Void](`document.getElementById("live-status").textContent.startsWith("Live")`,
			chromedp.WithPollingTimeout(10*time.Second)))
		if err != nil {
			t.Fatalf("%s: the page did not connect to its stream: %v", id, err)
		}
		eval[bool](t, ctx, `window.notReloaded = true`)
		appendBallots(t, b, id, id+"-after", tc.after...)
		_, err = chromedp.Run(ctx, chromedp.Poll[chromedp.Void](tc.follow,
			chromedp.WithPollingTimeout(3*time.Second), chromedp.WithPollingInterval(20*time.Millisecond)))
		if err != nil {
			t.Fatalf("%s: the page did not follow the ballots within 3s (%s): %v", id, tc.follow, err)
		}
		if !eval[bool](t, ctx, `window.notReloaded === true`) {
			t.Fatalf("%s: the page was reloaded to show the new figures", id)
		}
	}
}
