package audit

import (
	"fmt"
	"slices"
	"time"

	"tally/vote"
)

// This file owns what a poll's definition refuses: a vote's choice or
// ballot, its time outside the open window, and a definition that may not
// follow the one before it.

// Refuses says why d does not take a vote for candidate received at
// received, or "" when it does: the choice is not offered, or the vote was
// received before the poll opened or from its closing on. It is
// RefusesVote of a vote of one choice.
func (d Definition) Refuses(candidate string, received time.Time) string {
	_, why := d.RefusesVote(Leaf{CandidateID: candidate, ReceivedAt: received})
	return why
}

// RefusesVote says why d does not take the vote l, and the field of its
// line at fault, or "", "" when it does: a vote of one choice
// (candidate_id) for a poll whose ballot is of another kind, or a ballot
// for a single-choice poll (field candidate_id or ballot); a choice d does
// not offer (candidate_id); a ballot not in its kind's canonical form, or
// that breaks d's rules: a choice twice, fewer or more choices than the
// poll takes, a score over max_score, a ballot over budget (ballot); a
// vote received before the poll opened or from its closing on
// (received_at). The ballot is read by the audit's own reading
// (ballot.go), not by package vote's.
func (d Definition) RefusesVote(l Leaf) (field, why string) {
	_, _, field, why = d.judge(l)
	return field, why
}

// RefusesBallot is the part of RefusesVote that reads only the vote's
// choice or ballot, not when it was received: a caller that judges many
// votes under one definition, most of them with a ballot seen before (the
// rebuild), keeps its answer per ballot and asks RefusesReceivedAt of each
// vote. RefusesVote's answer is the first of the two that refuses.
func (d Definition) RefusesBallot(l Leaf) (field, why string) {
	_, _, field, why = d.judgeBallot(l)
	return field, why
}

// RefusesReceivedAt is the part of RefusesVote that reads only when the
// vote was received: before the poll opened, or from its closing on.
func (d Definition) RefusesReceivedAt(received time.Time) (field, why string) {
	if received.Before(d.OpensAt) {
		return "received_at", fmt.Sprintf("the vote was received at %s, before the poll opened at %s",
			received.UTC().Format(TimeFormat), d.OpensAt.UTC().Format(TimeFormat))
	}
	if d.ClosesAt != nil && !received.Before(*d.ClosesAt) {
		return "received_at", fmt.Sprintf("the vote was received at %s, once the poll had closed at %s",
			received.UTC().Format(TimeFormat), d.ClosesAt.UTC().Format(TimeFormat))
	}
	return "", ""
}

// judge is RefusesVote, with the ballot's items and ok when they can be
// read and the ballot keeps its poll's rules (whether or not it came in
// the window).
func (d Definition) judge(l Leaf) (items []ballotItem, ok bool, field, why string) {
	if items, ok, field, why = d.judgeBallot(l); !ok {
		return items, ok, field, why
	}
	field, why = d.RefusesReceivedAt(l.ReceivedAt)
	return items, true, field, why
}

// judgeBallot is RefusesBallot, with the ballot's items and ok when they
// can be read and the ballot keeps its poll's rules.
func (d Definition) judgeBallot(l Leaf) (items []ballotItem, ok bool, field, why string) {
	rules := d.BallotRules()
	switch {
	case rules.Kind == vote.KindSingle && l.Ballot != "":
		return nil, false, "ballot", fmt.Sprintf("the vote carries a ballot, %s, but the poll is single-choice: its votes carry candidate_id", quoteShort(l.Ballot))
	case rules.Kind != vote.KindSingle && l.Ballot == "":
		return nil, false, "candidate_id", fmt.Sprintf("the vote is of one choice (candidate_id %s), but the poll's ballot is %s: its votes carry a ballot", l.CandidateID, rules.Kind)
	case l.Ballot == "":
		if !slices.Contains(d.Choices, l.CandidateID) {
			return nil, false, "candidate_id", fmt.Sprintf("the vote is for %s, which the poll's definition in force does not offer", l.CandidateID)
		}
		items = []ballotItem{{choice: slices.Index(d.Choices, l.CandidateID)}}
	default:
		if items, why = readBallot(&d, l.Ballot); why != "" {
			return nil, false, "ballot", why
		}
	}
	return items, true, "", ""
}

// Follows says why d may not follow prev in a poll's log, and the field
// that changed, or "" when it may: a later definition changes only the
// closing time, and only to close earlier (or at all), as tally poll
// close does. Anything else (another choice, title, opening, eligibility,
// ballot or answers mode, a later closing) is a change to the question
// after it was asked, named by the first field that differs in the order
// of the cases below; a definition identical to prev is field
// "definition", since tally never writes one.
func (d Definition) Follows(prev Definition) (field, why string) {
	switch {
	case d.PollID != prev.PollID:
		return "poll_id", fmt.Sprintf("the definition is of poll %s, in poll %s's log", d.PollID, prev.PollID)
	case d.Title != prev.Title:
		return "title", "the definition changes the poll's title"
	case !d.OpensAt.Equal(prev.OpensAt):
		return "opens_at", "the definition changes when the poll opens"
	case !slices.Equal(d.Choices, prev.Choices):
		return "choices", "the definition changes the poll's choices"
	case (d.EligibleHash == nil) != (prev.EligibleHash == nil) || d.EligibleHash != nil && *d.EligibleHash != *prev.EligibleHash:
		return "eligible_hash", "the definition changes who may vote"
	case d.BallotRules().Answers != prev.BallotRules().Answers:
		return "answers", "the definition changes which of a principal's ballots counts"
	case d.BallotRules() != prev.BallotRules():
		return "ballot", "the definition changes the poll's ballot"
	case d.ClosesAt == nil && prev.ClosesAt != nil:
		return "closes_at", "the definition reopens a closed poll"
	case d.ClosesAt != nil && prev.ClosesAt != nil && d.ClosesAt.After(*prev.ClosesAt):
		return "closes_at", "the definition closes the poll later than the one before it"
	case d.ClosesAt == nil && prev.ClosesAt == nil || d.ClosesAt != nil && prev.ClosesAt != nil && d.ClosesAt.Equal(*prev.ClosesAt):
		return "definition", "the definition repeats the one before it unchanged (tally writes one only when the closing time moves)"
	}
	return "", ""
}
