package loadtest

import (
	"encoding/json"
	"fmt"

	"tally/client"
	"tally/vote"
)

// This file owns what the loadtest sends as a ballot: the rules of its
// polls, and for each kind a fixed set of distinct valid ballots, one per
// choice, which the ground truth names by index (key.candidate) as it
// names a single choice. A second response or a key reuse then sends
// another ballot of the set.

// pollRules are the rules of the session's polls.
func pollRules(c Config) (vote.Rules, error) {
	spec := vote.Spec{Kind: string(c.Kind), Answers: string(c.Answers)}
	switch c.Kind {
	case vote.KindMultiple:
		spec.MaxChoices = ptr(min(2, c.PollChoices))
	case vote.KindScore:
		spec.MaxScore, spec.Budget = ptr(5), ptr(8)
	}
	r, err := vote.NewRules(spec, c.PollChoices)
	if err != nil {
		return vote.Rules{}, fmt.Errorf("polls of kind %s with %d choices: %w", c.Kind, c.PollChoices, err)
	}
	return r, nil
}

func ptr(v int) *int { return &v }

// ballotSet is the ballots of a session's polls, in canonical form, by
// index, and the index of each.
type ballotSet struct {
	rules   vote.Rules
	choices []string
	list    []string
	index   map[string]int
}

// newBallotSet makes the ballots of the kind of cfg: for choice i of n, a
// ballot whose first choice is i (single: i; multiple: i, and i+1 for odd
// i; approve: i yes, i+1 no, i+2 abstain; score: i scored 5, i+1 scored
// i mod 4; ranked: i, i+1, ... , 1 + i mod n of them), all distinct and
// valid for pollRules.
func newBallotSet(cfg Config) (*ballotSet, error) {
	r, err := pollRules(cfg)
	if err != nil {
		return nil, err
	}
	n := cfg.PollChoices
	bs := &ballotSet{rules: r, choices: make([]string, n), index: map[string]int{}}
	for i := range bs.choices {
		bs.choices[i] = candidateID(i)
	}
	ch := func(i int) string { return bs.choices[i%n] }
	for i := range n {
		var v any
		switch r.Kind {
		case vote.KindSingle:
			v = ch(i)
		case vote.KindMultiple:
			v = []string{ch(i)}
			if i%2 == 1 {
				v = []string{ch(i), ch(i + 1)}
			}
		case vote.KindApprove:
			m := map[string]string{ch(i): vote.Yes, ch(i + 1): vote.No}
			if n > 2 {
				m[ch(i+2)] = vote.Abstain
			}
			v = m
		case vote.KindScore:
			v = map[string]int{ch(i): 5, ch(i + 1): i % 4}
		case vote.KindRanked:
			var order []string
			for j := range 1 + i%n {
				order = append(order, ch(i+j))
			}
			v = order
		}
		raw, _ := json.Marshal(v)
		b, err := vote.ParseBallot(r.Kind, raw)
		if err == nil {
			err = r.Check(bs.choices, b)
		}
		if err != nil {
			return nil, fmt.Errorf("loadtest: ballot %d of kind %s: %w", i, r.Kind, err)
		}
		c := b.Canonical()
		if _, dup := bs.index[c]; dup {
			return nil, fmt.Errorf("loadtest: ballot %d of kind %s, %s, is given twice", i, r.Kind, c)
		}
		bs.index[c] = i
		bs.list = append(bs.list, c)
	}
	return bs, nil
}

// vote is the vote of ballot i, with event id eventID, in poll.
func (bs *ballotSet) vote(eventID, poll string, i int) client.Vote {
	v := client.Vote{EventId: eventID, PollId: poll}
	if bs.rules.Kind == vote.KindSingle {
		v.CandidateId = &bs.list[i]
		return v
	}
	v.Ballot = new(client.Ballot)
	_ = v.Ballot.UnmarshalJSON([]byte(bs.list[i])) // keeps the canonical form as it is
	return v
}

func (bs *ballotSet) count(counted []int) *vote.Count {
	c := vote.NewCount(bs.rules.Kind, bs.choices)
	for _, i := range counted {
		b, _ := vote.ParseCanonical(bs.rules.Kind, bs.list[i])
		c.Add(b, 1)
	}
	return c
}
