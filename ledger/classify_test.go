package ledger

import "testing"

// TestDecide holds the full rules for one event to every branch, without a
// database: who owns the key (a ledger row, a rejection record, an earlier
// event of the batch, nobody), then the catalog's checks in order, then the
// (poll, principal) taken in the database or earlier in the batch.
func TestDecide(t *testing.T) {
	fpA, fpB := [32]byte{'a'}, [32]byte{'b'}
	seq, closed := int64(7), string(ReasonPollClosed)
	valid := facts{pollExists: true, pollOpen: true, choiceValid: true, eligible: true}
	with := func(edit func(*facts)) facts { f := valid; edit(&f); return f }
	rowOwner := owner{fp: fpA, replay: Outcome{Status: StatusDuplicate, Seq: seq}}
	rejOwner := owner{fp: fpA, replay: Outcome{Status: StatusRejected, Reason: ReasonPollClosed}}
	newRow := owner{fp: fpA, replay: Outcome{Status: StatusDuplicate}}
	rejected := func(r Reason) Outcome { return Outcome{Status: StatusRejected, Reason: r} }
	keyReused := rejected(ReasonKeyReused)
	for _, tc := range []struct {
		name     string
		f        facts
		prior    *owner // owned earlier in the batch
		answered bool   // (poll, principal) taken earlier in the batch
		want     decision
	}{
		{name: "ledger row, same payload", f: with(func(f *facts) { f.keySeq, f.keyFP = &seq, fpA }),
			want: decision{outcome: rowOwner.replay, owner: rowOwner}},
		{name: "ledger row, other payload", f: with(func(f *facts) { f.keySeq, f.keyFP = &seq, fpB }),
			want: decision{outcome: keyReused, owner: owner{fp: fpB, replay: rowOwner.replay}, record: true}},
		{name: "rejection record, same payload", f: with(func(f *facts) { f.rejReason, f.rejFP = &closed, fpA }),
			want: decision{outcome: rejOwner.replay, owner: rejOwner}},
		{name: "rejection record, other payload", f: with(func(f *facts) { f.rejReason, f.rejFP = &closed, fpB }),
			want: decision{outcome: keyReused, owner: owner{fp: fpB, replay: rejOwner.replay}, record: true}},
		{name: "ledger row wins over rejection record", f: with(func(f *facts) {
			f.keySeq, f.keyFP, f.rejReason, f.rejFP = &seq, fpA, &closed, fpA
		}), want: decision{outcome: rowOwner.replay, owner: rowOwner}},
		{name: "recorded earlier in batch, same payload", prior: &newRow,
			want: decision{outcome: newRow.replay, owner: newRow}},
		{name: "recorded earlier in batch, other payload", prior: &owner{fp: fpB, replay: newRow.replay},
			want: decision{outcome: keyReused, owner: owner{fp: fpB, replay: newRow.replay}, record: true}},
		{name: "rejected earlier in batch, same payload", prior: &rejOwner,
			want: decision{outcome: rejOwner.replay, owner: rejOwner}},
		{name: "unknown poll", f: facts{},
			want: decision{outcome: rejected(ReasonUnknownPoll), owner: owner{fpA, rejected(ReasonUnknownPoll)}, record: true}},
		{name: "closed", f: with(func(f *facts) { f.pollOpen, f.choiceValid, f.eligible = false, false, false }),
			want: decision{outcome: rejected(ReasonPollClosed), owner: owner{fpA, rejected(ReasonPollClosed)}, record: true}},
		{name: "invalid choice", f: with(func(f *facts) { f.choiceValid, f.eligible = false, false }),
			want: decision{outcome: rejected(ReasonInvalidChoice), owner: owner{fpA, rejected(ReasonInvalidChoice)}, record: true}},
		{name: "not eligible", f: with(func(f *facts) { f.eligible, f.answeredSeq = false, &seq }),
			want: decision{outcome: rejected(ReasonNotEligible), owner: owner{fpA, rejected(ReasonNotEligible)}, record: true}},
		{name: "already answered in the database", f: with(func(f *facts) { f.answeredSeq = &seq }),
			want: decision{outcome: rejected(ReasonAlreadyResponded), owner: owner{fpA, rejected(ReasonAlreadyResponded)}, record: true}},
		{name: "already answered earlier in batch", f: valid, answered: true,
			want: decision{outcome: rejected(ReasonAlreadyResponded), owner: owner{fpA, rejected(ReasonAlreadyResponded)}, record: true}},
		{name: "fresh", f: valid,
			want: decision{outcome: Outcome{Status: StatusRecorded}, owner: newRow, insert: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var prior owner
			if tc.prior != nil {
				prior = *tc.prior
			}
			if got := decide(&tc.f, fpA, prior, tc.prior != nil, tc.answered); got != tc.want {
				t.Errorf("decide = %+v, want %+v", got, tc.want)
			}
		})
	}
}
