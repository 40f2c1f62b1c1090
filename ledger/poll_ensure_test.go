package ledger_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"tally/audit"
	"tally/ledger"
)

// This file tests EnsurePoll, the repeat of a poll's creation, and the
// validation of a new poll, which names the field at fault.

// TestEnsurePoll: a poll is created once and then found as asked; a
// request differing in one field is a *DefinitionConflict naming it; an
// absent opening time matches, and a poll closed since still matches the
// request that created it.
func TestEnsurePoll(t *testing.T) {
	t.Parallel()
	b := setup(t)
	opens := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	closes := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	base := ledger.Poll{ID: "topic", Title: "Next topic?", OpensAt: opens, ClosesAt: &closes,
		Choices: []string{"api", "cli"}, Eligible: []string{"p-1", "p-2"}}
	with := func(change func(*ledger.Poll)) ledger.Poll {
		p := base
		p.Choices, p.Eligible = slices.Clone(base.Choices), slices.Clone(base.Eligible)
		change(&p)
		return p
	}
	ensure := func(p ledger.Poll) (bool, error) { return b.store.EnsurePoll(b.ctx, p) }
	if created, err := ensure(base); !created || err != nil {
		t.Fatalf("first EnsurePoll: created %v, %v; want created", created, err)
	}
	later := closes.Add(time.Hour)
	matches := map[string]ledger.Poll{
		"the same poll":                    base,
		"no opening time":                  with(func(p *ledger.Poll) { p.OpensAt = time.Time{} }),
		"the opening time in another zone": with(func(p *ledger.Poll) { p.OpensAt = opens.In(time.FixedZone("X", 3600)) }),
		"the eligible in another order":    with(func(p *ledger.Poll) { p.Eligible = []string{"p-2", "p-1"} }),
	}
	conflicts := []struct {
		field string
		p     ledger.Poll
	}{
		{"title", with(func(p *ledger.Poll) { p.Title = "Next topic" })},
		{"choices", with(func(p *ledger.Poll) { p.Choices = []string{"cli", "api"} })},
		{"choices", with(func(p *ledger.Poll) { p.Choices = append(p.Choices, "docs") })},
		{"opens_at", with(func(p *ledger.Poll) { p.OpensAt = opens.Add(time.Second) })},
		{"closes_at", with(func(p *ledger.Poll) { p.ClosesAt = nil })},
		{"closes_at", with(func(p *ledger.Poll) { p.ClosesAt = &later })},
		{"eligible", with(func(p *ledger.Poll) { p.Eligible = []string{"p-1"} })},
		{"eligible", with(func(p *ledger.Poll) { p.Eligible = nil })},
		{"public_results", with(func(p *ledger.Poll) { p.PublicResults = true })},
	}
	check := func(when string) {
		t.Helper()
		for name, p := range matches {
			if created, err := ensure(p); created || err != nil {
				t.Errorf("%s: %s: created %v, %v; want found as asked", when, name, created, err)
			}
		}
		for _, c := range conflicts {
			created, err := ensure(c.p)
			var conflict *ledger.DefinitionConflict
			if created || !errors.As(err, &conflict) || conflict.Field != c.field || conflict.PollID != "topic" ||
				!errors.Is(err, ledger.ErrExists) || !strings.Contains(err.Error(), "another "+c.field) {
				t.Errorf("%s: a request differing in %s: created %v, %v; want a DefinitionConflict naming it", when, c.field, created, err)
			}
		}
	}
	check("while open")
	if err := b.store.ClosePoll(b.ctx, "topic", time.Now()); err != nil {
		t.Fatal(err)
	}
	check("once closed")
	if p, err := b.store.Poll(b.ctx, "topic"); err != nil || p.ClosesAt == nil || !p.ClosesAt.Before(closes) {
		t.Fatalf("poll after the close: %+v, %v; want it closed before %s", p, err, closes)
	}
	if got := len(definitions(t, b, "topic")); got != 2 {
		t.Fatalf("%d definitions in the poll's log, want 2: the repeats appended none", got)
	}
}

// TestEnsurePollAtOnce: many EnsurePoll of the same poll at once create
// it once; the others find it.
func TestEnsurePollAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := ledger.Poll{ID: "race", Title: "Race?", Choices: []string{"a", "b"}}
	const n = 8
	created := make([]bool, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { created[i], errs[i] = b.store.EnsurePoll(b.ctx, p) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("EnsurePoll at once: %v", err)
	}
	if c := len(slices.DeleteFunc(created, func(c bool) bool { return !c })); c != 1 {
		t.Fatalf("%d of %d EnsurePoll created the poll, want 1", c, n)
	}
}

// TestNewPollFieldErrors: each invalid poll is refused with a
// *FieldError naming the field at fault, and is not stored; each
// boundary's valid side is created.
func TestNewPollFieldErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	opens := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	before, same := opens.Add(-time.Second), opens
	many := make([]string, ledger.MaxChoices+1)
	for i := range many {
		many[i] = fmt.Sprintf("c%d", i)
	}
	crowd := make([]string, ledger.MaxEligible+1)
	for i := range crowd {
		crowd[i] = fmt.Sprintf("p-%d", i)
	}
	cases := []struct {
		name  string
		p     ledger.Poll
		field string // "": valid, created
	}{
		{"empty id", ledger.Poll{ID: "", Title: "T", Choices: []string{"a"}}, "poll_id"},
		{"id with a space", ledger.Poll{ID: "a b", Title: "T", Choices: []string{"a"}}, "poll_id"},
		{"id of 65 bytes", ledger.Poll{ID: strings.Repeat("i", 65), Title: "T", Choices: []string{"a"}}, "poll_id"},
		{"id of 64 bytes", ledger.Poll{ID: strings.Repeat("i", 64), Title: "T", Choices: []string{"a"}}, ""},
		{"empty title", ledger.Poll{ID: "t1", Title: "", Choices: []string{"a"}}, "title"},
		{"title too long", ledger.Poll{ID: "t2", Title: strings.Repeat("t", audit.MaxTitleLen+1), Choices: []string{"a"}}, "title"},
		{"title of the most bytes", ledger.Poll{ID: "t3", Title: strings.Repeat("t", audit.MaxTitleLen), Choices: []string{"a"}}, ""},
		{"title not UTF-8", ledger.Poll{ID: "t4", Title: "caf\xe9", Choices: []string{"a"}}, "title"},
		{"no choices", ledger.Poll{ID: "c1", Title: "T"}, "choices"},
		{"a choice twice", ledger.Poll{ID: "c2", Title: "T", Choices: []string{"a", "b", "a"}}, "choices"},
		{"a bad choice", ledger.Poll{ID: "c3", Title: "T", Choices: []string{"a", "b c"}}, "choices"},
		{"too many choices", ledger.Poll{ID: "c4", Title: "T", Choices: many}, "choices"},
		{"the most choices", ledger.Poll{ID: "c5", Title: "T", Choices: many[:len(many)-1]}, ""},
		{"one choice", ledger.Poll{ID: "c6", Title: "T", Choices: []string{"a"}}, ""},
		{"too many eligible", ledger.Poll{ID: "e2", Title: "T", Choices: []string{"a"}, Eligible: crowd}, "eligible"},
		{"the most eligible", ledger.Poll{ID: "e3", Title: "T", Choices: []string{"a"}, Eligible: crowd[:len(crowd)-1]}, ""},
		{"a bad eligible id", ledger.Poll{ID: "e1", Title: "T", Choices: []string{"a"}, Eligible: []string{"p-1", "no good"}}, "eligible"},
		{"closes before it opens", ledger.Poll{ID: "w1", Title: "T", Choices: []string{"a"}, OpensAt: opens, ClosesAt: &before}, "closes_at"},
		{"closes as it opens", ledger.Poll{ID: "w2", Title: "T", Choices: []string{"a"}, OpensAt: opens, ClosesAt: &same}, ""},
	}
	for _, c := range cases {
		created, err := b.store.EnsurePoll(b.ctx, c.p)
		if c.field == "" {
			if !created || err != nil {
				t.Errorf("%s: created %v, %v; want it created", c.name, created, err)
			}
			continue
		}
		var fe *ledger.FieldError
		if created || !errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("%s: created %v, %v; want a FieldError of %s", c.name, created, err, c.field)
			continue
		}
		// A stated limit is named, and only over one.
		wantLimit := map[string]int{"too many choices": ledger.MaxChoices, "too many eligible": ledger.MaxEligible}[c.name]
		if fe.Limit != wantLimit || wantLimit != 0 && !strings.Contains(fe.Reason, fmt.Sprint(wantLimit)) {
			t.Errorf("%s: limit %d (%s), want %d named", c.name, fe.Limit, fe.Reason, wantLimit)
		}
		if _, err := b.store.Poll(b.ctx, c.p.ID); !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("%s: the refused poll %.20q reads back: %v", c.name, c.p.ID, err)
		}
	}
	if got := len(actions(t, b)); got != 6 {
		t.Errorf("%d poll.create actions, want one for each of the 6 valid polls", got)
	}

	// AddPrincipals names its fields too.
	for _, c := range []struct {
		names []string
		role  string
		field string
	}{
		{nil, "", "names"},
		{[]string{"ok", ""}, "", "names"},
		{[]string{strings.Repeat("n", 201)}, "", "names"},
		{[]string{"ok"}, "boss", "role"},
		{[]string{"ok"}, "Admin", "role"},
	} {
		_, err := b.store.AddPrincipals(b.ctx, c.names, c.role)
		var fe *ledger.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("AddPrincipals(%d names, role %q): %v, want a FieldError of %s", len(c.names), c.role, err, c.field)
		}
	}
	if ps, err := b.store.Principals(b.ctx); err != nil || len(ps) != 0 {
		t.Errorf("principals after refused adds: %d, %v; want none", len(ps), err)
	}
}
