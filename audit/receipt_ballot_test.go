package audit_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"tally/audit"
)

// A receipt of a ballot carries it raw, as the export does, reads back
// as the receipt it was, verifies, and is refused with its ballot
// changed, spelt otherwise, or beside a candidate.
func TestBallotReceipt(t *testing.T) {
	k := testKeys(t)
	var tr audit.Tree
	leaves := []audit.Leaf{exampleBallotLeaf, exampleBallotLeaf}
	leaves[1].ClientEventID, leaves[1].Ballot = "e-3", `{"soup":1}`
	for _, l := range leaves {
		if err := tr.AppendLeaf(l); err != nil {
			t.Fatal(err)
		}
	}
	proof, err := tr.InclusionProof(0, 2)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := tr.Root(2)
	rc, err := audit.NewReceipt(exampleBallotLeaf, 0, 2, sign(t, k.signer, audit.Origin(testLogName, "lunch"), 2, root), proof)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(rc)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), `{"poll_id":"lunch","ballot":{"salad":2,"soup":3},"principal_id":"p-7",`) {
		t.Fatalf("receipt %s: want the ballot raw after poll_id, no candidate_id", b)
	}
	back, err := audit.ParseReceipt(b)
	if err != nil || back.Ballot != rc.Ballot || back.CandidateID != "" {
		t.Fatalf("read back %+v (%v)", back, err)
	}
	if _, err := audit.VerifyReceipt(back, k.verifier, testLogName); err != nil {
		t.Fatalf("an honest ballot receipt: %v", err)
	}
	for _, tc := range []struct {
		name, from, to string
		want           error
	}{
		{"another ballot", `{"salad":2,"soup":3}`, `{"salad":3,"soup":2}`, audit.ErrProof},
		{"another spelling", `{"salad":2,"soup":3}`, `{"salad":2, "soup":3}`, audit.ErrMalformed},
		{"a candidate beside", `"principal_id"`, `"candidate_id":"soup","principal_id"`, audit.ErrMalformed},
		{"a ballot as a string", `{"salad":2,"soup":3}`, `"{\"salad\":2,\"soup\":3}"`, audit.ErrMalformed},
	} {
		changed := strings.Replace(string(b), tc.from, tc.to, 1)
		r, err := audit.ParseReceipt([]byte(changed))
		if err == nil {
			_, err = audit.VerifyReceipt(r, k.verifier, testLogName)
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}
