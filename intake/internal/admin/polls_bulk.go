package admin

import (
	"encoding/json"
	"fmt"
	"net/http"

	"tally/intake/internal/problem"
	"tally/ledger"
)

// This file owns POST /v1/polls with an array: many polls in one request
// and one transaction (ledger.Store.EnsurePolls), each answered as it
// would be alone, in a list in the request's order.

// pollCreated is one poll's answer in the list of a bulk create: the
// status and, for a refusal, the problem type and detail the poll would
// get alone.
type pollCreated struct {
	PollID string `json:"poll_id"`
	Status int    `json:"status"`
	Type   string `json:"type,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// createPolls takes POST /v1/polls with an array of poll bodies: 200
// with {"polls": [...]}, one answer per poll (201 made, 200 there as
// asked, 409 there otherwise, 400 or 422 refused); 400 when the body is
// not an array of 1 to ledger.MaxPollsPerCreate objects.
func (a *Admin) createPolls(w http.ResponseWriter, r *http.Request, admin Principal, body []byte) {
	var raws []json.RawMessage
	if err := json.Unmarshal(body, &raws); err != nil {
		problem.Write(w, http.StatusBadRequest, problem.BadRequest, fmt.Sprintf("the body is not a JSON array of polls: %v: send [%s, ...]", err, pollShape), 0)
		return
	}
	if len(raws) == 0 || len(raws) > ledger.MaxPollsPerCreate {
		problem.Write(w, http.StatusBadRequest, problem.BadRequest,
			fmt.Sprintf("the array holds %d polls; a request takes 1 to %d: split it", len(raws), ledger.MaxPollsPerCreate), 0)
		return
	}
	out := make([]pollCreated, len(raws))
	var polls []ledger.Poll
	var at []int // of out, for each of polls
	for i, raw := range raws {
		var q pollRequest
		err := decodeStrict(raw, &q)
		if err != nil {
			out[i] = pollCreated{PollID: q.PollID, Status: http.StatusBadRequest, Type: problem.BadRequest.URI(),
				Detail: fmt.Sprintf("poll %d of the array: %s: send %s", i+1, err, pollShape)}
			continue
		}
		p, err := q.poll()
		if status, prob, detail, ok := pollRefused(err); ok {
			out[i] = pollCreated{PollID: q.PollID, Status: status, Type: prob.URI(), Detail: detail}
			continue
		} else if err != nil {
			a.writeFailed(w, r, err)
			return
		}
		polls, at = append(polls, p), append(at, i)
	}
	if len(polls) > 0 {
		var outcomes []ledger.PollOutcome
		err := a.ask(r, func() error {
			var err error
			outcomes, err = a.store.EnsurePolls(ledger.ActingAs(r.Context(), admin.ID), polls)
			return err
		})
		if err != nil {
			a.writeFailed(w, r, err)
			return
		}
		created := 0
		for k, o := range outcomes {
			c := pollCreated{PollID: polls[k].ID, Status: http.StatusOK}
			if status, prob, detail, ok := pollRefused(o.Err); ok {
				c.Status, c.Type, c.Detail = status, prob.URI(), detail
			} else if o.Created {
				c.Status = http.StatusCreated
				created++
			}
			out[at[k]] = c
		}
		if created > 0 { // admin_actions names each
			a.logWrite(r, admin, "poll.create", fmt.Sprintf("%d polls", created))
		}
		a.catchUpAfter(r)
	}
	problem.JSON(w, http.StatusOK, struct {
		Polls []pollCreated `json:"polls"`
	}{out})
}
