package cli

import (
	"fmt"
	"time"

	"tally/audit"
	"tally/ledger"
)

// maxReceivedSkew is how far past the time of the import a received_at may
// lie: clocks differ a little, but an event cannot have been received in
// the future, and one dated there would sort after the votes still to come.
const maxReceivedSkew = 5 * time.Minute

// parseImportLine reads one line of an import file, strictly, as
// tally audit verify reads an export (audit.ParseExportLine): seq,
// recorded_at and leaf_index are read and ignored. now, the time of the
// import, stands in for a missing received_at and bounds a given one
// (maxReceivedSkew). A definition line comes back as its definition,
// with no event. Its errors say what is wrong with the line.
func parseImportLine(line []byte, now time.Time) (ledger.Event, *audit.Definition, error) {
	r, err := audit.ParseExportLine(line)
	if err != nil {
		return ledger.Event{}, nil, err
	}
	if r.Definition != nil {
		return ledger.Event{}, r.Definition, nil
	}
	e := ledger.Event{PrincipalID: r.PrincipalID, ClientEventID: r.EventID, PollID: r.PollID,
		CandidateID: r.CandidateID, Ballot: r.Ballot, ReceivedAt: now}
	if !r.ReceivedAt.IsZero() {
		if r.ReceivedAt.After(now.Add(maxReceivedSkew)) {
			return ledger.Event{}, nil, fmt.Errorf(`field "received_at" is %s, later than the time of the import (%s) plus %s: `+
				`an event cannot have been received in the future; correct the time, or leave received_at out to use the time of the import`,
				r.ReceivedAt.Format(time.RFC3339), now.UTC().Format(time.RFC3339), maxReceivedSkew)
		}
		e.ReceivedAt = r.ReceivedAt
	}
	return e, nil, nil
}
