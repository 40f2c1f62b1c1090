package audit_test

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"tally/audit"
	"tally/vote"
)

// The examples of docs/audit.md, "The ballot leaf" and "The definition
// leaf with rules": an independent verifier can check its encoder against
// these bytes and these hashes.
var (
	exampleBallotLeaf = audit.Leaf{PollID: "lunch", Ballot: `{"salad":2,"soup":3}`, PrincipalID: "p-7",
		ClientEventID: "e-2", ReceivedAt: time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)}
	exampleBallotBytes = "04 056c756e6368 00147b2273616c6164223a322c22736f7570223a337d 03702d37 03652d32 00064bf535b0f240"
	exampleBallotHash  = "86fa262bfae6872a01f43e7285201ebcbe4f4ff5766c66ae527f3b8902764b5f"

	exampleRulesDefinition = func() audit.Definition {
		d := exampleDefinition
		d.Rules = vote.Rules{Kind: vote.KindScore, MaxScore: 5, Budget: 6, Answers: vote.AnswersLatest}
		return d
	}()
	exampleRulesBytes = "03 056c756e6368 00064c756e63683f 00064bf535af1000 0100064bf60c42b400 00 0002 04736f7570 0573616c6164 03 00000005 00000006 01"
	exampleRulesHash  = "eba44142556a7c5b5313a88b6182fe23fd4323d7645f4f62f12eea32e6e5354d"
)

func TestBallotLeafEncodingExample(t *testing.T) {
	b, err := audit.EncodeLeaf(nil, exampleBallotLeaf)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := hex.EncodeToString(b), strings.ReplaceAll(exampleBallotBytes, " ", ""); got != want {
		t.Fatalf("encoding\n got %s\nwant %s", got, want)
	}
	h, err := audit.LeafHash(exampleBallotLeaf)
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(h[:]); got != exampleBallotHash {
		t.Fatalf("leaf hash\n got %s\nwant %s", got, exampleBallotHash)
	}
	back, err := audit.DecodeLeaf(b)
	if err != nil || back != exampleBallotLeaf {
		t.Fatalf("decoded %+v (%v), want %+v", back, err, exampleBallotLeaf)
	}
}

func TestRulesDefinitionEncodingExample(t *testing.T) {
	b, err := audit.EncodeDefinition(nil, exampleRulesDefinition)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := hex.EncodeToString(b), strings.ReplaceAll(exampleRulesBytes, " ", ""); got != want {
		t.Fatalf("encoding\n got %s\nwant %s", got, want)
	}
	h, _ := audit.DefinitionHash(exampleRulesDefinition)
	if got := hex.EncodeToString(h[:]); got != exampleRulesHash {
		t.Fatalf("leaf hash\n got %s\nwant %s", got, exampleRulesHash)
	}
}

// Rules of every kind, with their parameters' bounds: each encodes as a
// version 3 leaf that decodes to the same definition, and the default
// rules, given or left zero, as the version 2 leaf of before.
func TestDefinitionRulesRoundTrip(t *testing.T) {
	v2, _ := audit.EncodeDefinition(nil, exampleDefinition)
	for _, tc := range []struct {
		name    string
		rules   vote.Rules
		version byte
	}{
		{"zero", vote.Rules{}, 2},
		{"single", vote.Single, 2},
		{"single latest", vote.Rules{Kind: vote.KindSingle, Answers: vote.AnswersLatest}, 3},
		{"multiple 0..2", vote.Rules{Kind: vote.KindMultiple, MinChoices: 0, MaxChoices: 2, Answers: vote.AnswersFinal}, 3},
		{"multiple 1..1 latest", vote.Rules{Kind: vote.KindMultiple, MinChoices: 1, MaxChoices: 1, Answers: vote.AnswersLatest}, 3},
		{"approve", vote.Rules{Kind: vote.KindApprove, Answers: vote.AnswersFinal}, 3},
		{"score no budget", vote.Rules{Kind: vote.KindScore, MaxScore: vote.MaxScoreLimit, Answers: vote.AnswersFinal}, 3},
		{"score budget", vote.Rules{Kind: vote.KindScore, MaxScore: 1, Budget: vote.MaxBudget, Answers: vote.AnswersFinal}, 3},
		{"ranked", vote.Rules{Kind: vote.KindRanked, Answers: vote.AnswersLatest}, 3},
	} {
		d := exampleDefinition
		d.Rules = tc.rules
		b, err := audit.EncodeDefinition(nil, d)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if b[0] != tc.version {
			t.Errorf("%s: version %d, want %d", tc.name, b[0], tc.version)
		}
		if tc.version == 2 && string(b) != string(v2) {
			t.Errorf("%s: the leaf is not the version 2 leaf of before", tc.name)
		}
		back, err := audit.DecodeDefinition(b)
		if err != nil || back.BallotRules() != d.BallotRules() {
			t.Errorf("%s: decoded rules %+v (%v), want %+v", tc.name, back.Rules, err, d.BallotRules())
		}
	}
}

// Check refuses rules that vote.NewRules would not make for the
// definition's choices.
func TestDefinitionRulesCheck(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rules vote.Rules
		says  string
	}{
		{"no answers", vote.Rules{Kind: vote.KindRanked}, "no kind or no answers"},
		{"no kind", vote.Rules{Answers: vote.AnswersLatest}, "no kind or no answers"},
		{"an unknown kind", vote.Rules{Kind: "borda", Answers: vote.AnswersFinal}, "ballot.kind"},
		{"an unknown answers", vote.Rules{Kind: vote.KindRanked, Answers: "first"}, "answers"},
		{"max above the choices", vote.Rules{Kind: vote.KindMultiple, MinChoices: 1, MaxChoices: 3, Answers: vote.AnswersFinal}, "max_choices is 3"},
		{"min above max", vote.Rules{Kind: vote.KindMultiple, MinChoices: 2, MaxChoices: 1, Answers: vote.AnswersFinal}, "above max_choices"},
		{"max 0", vote.Rules{Kind: vote.KindMultiple, MaxChoices: 0, Answers: vote.AnswersFinal}, "max_choices is 0"},
		{"max_score 0", vote.Rules{Kind: vote.KindScore, Answers: vote.AnswersFinal}, "max_score is 0"},
		{"max_score too high", vote.Rules{Kind: vote.KindScore, MaxScore: vote.MaxScoreLimit + 1, Answers: vote.AnswersFinal}, "max_score is"},
		{"budget too high", vote.Rules{Kind: vote.KindScore, MaxScore: 1, Budget: vote.MaxBudget + 1, Answers: vote.AnswersFinal}, "budget is"},
		{"a parameter of another kind", vote.Rules{Kind: vote.KindRanked, MaxScore: 3, Answers: vote.AnswersFinal}, "a parameter its kind has not"},
		{"min_choices of a single poll", vote.Rules{Kind: vote.KindSingle, MinChoices: 1, Answers: vote.AnswersLatest}, "a parameter its kind has not"},
	} {
		d := exampleDefinition
		d.Rules = tc.rules
		if _, err := audit.EncodeDefinition(nil, d); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.says)
		}
	}
	d := exampleDefinition
	d.Choices = make([]string, vote.MaxRankedChoices+1)
	for i := range d.Choices {
		d.Choices[i] = "c" + itoa(i)
	}
	d.Rules = vote.Rules{Kind: vote.KindRanked, Answers: vote.AnswersFinal}
	if _, err := audit.EncodeDefinition(nil, d); err == nil || !strings.Contains(err.Error(), "at most 16") {
		t.Errorf("a ranked poll of 17 choices: %v", err)
	}
}

// DecodeDefinition refuses what is no version 3 leaf: the default rules
// (which are version 2), an unknown kind or answers byte, parameters cut
// short or left over.
func TestDecodeRulesDefinitionRefusals(t *testing.T) {
	good, _ := audit.EncodeDefinition(nil, exampleRulesDefinition)
	body := good[:len(good)-10] // up to the rules
	v2, _ := audit.EncodeDefinition(nil, exampleDefinition)
	for _, tc := range []struct {
		name string
		b    []byte
		says string
	}{
		{"the default rules as version 3", append(append([]byte{3}, v2[1:]...), 0, 0), "not canonical"},
		{"an unknown kind", append(append([]byte{}, body...), 5, 0), "kind byte 5"},
		{"an unknown answers", append(append([]byte{}, good[:len(good)-1]...), 2), "answers byte 2"},
		{"no rules", append([]byte{}, body...), "cut short"},
		{"parameters cut", append(append([]byte{}, body...), 3, 0, 0, 0, 5), "cut short"},
		{"no answers", good[:len(good)-1], "cut short"},
		{"a byte left over", append(append([]byte{}, good...), 0), "left over"},
		{"version 2 with rules after", append(append([]byte{}, v2...), 4, 0), "left over"},
		{"a rule broken", append(append([]byte{}, body...), 1, 0, 3, 0, 1, 0), "min_choices (3) is above max_choices (1)"},
	} {
		if _, err := audit.DecodeDefinition(tc.b); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.says)
		}
	}
}

// A later definition may not change the rules.
func TestDefinitionFollowsRules(t *testing.T) {
	for _, tc := range []struct {
		name        string
		prev, next  vote.Rules
		field       string
		sameAsFinal bool
	}{
		{"zero after single", vote.Single, vote.Rules{}, "definition", true}, // the same rules: a repeated definition, not another ballot
		{"another kind", vote.Rules{Kind: vote.KindRanked, Answers: vote.AnswersFinal}, vote.Rules{Kind: vote.KindApprove, Answers: vote.AnswersFinal}, "ballot", false},
		{"another parameter", vote.Rules{Kind: vote.KindScore, MaxScore: 5, Answers: vote.AnswersFinal}, vote.Rules{Kind: vote.KindScore, MaxScore: 5, Budget: 6, Answers: vote.AnswersFinal}, "ballot", false},
		{"latest to final", vote.Rules{Kind: vote.KindRanked, Answers: vote.AnswersLatest}, vote.Rules{Kind: vote.KindRanked, Answers: vote.AnswersFinal}, "answers", false},
		{"single to latest", vote.Rules{}, vote.Rules{Kind: vote.KindSingle, Answers: vote.AnswersLatest}, "answers", false},
	} {
		prev, next := exampleDefinition, exampleDefinition
		prev.Rules, next.Rules = tc.prev, tc.next
		if field, _ := next.Follows(prev); field != tc.field {
			t.Errorf("%s: field %q, want %q", tc.name, field, tc.field)
		}
	}
}

// The ballot leaf refuses what is not a ballot in canonical form of a
// kind other than single, and a vote with both a candidate and a ballot.
func TestBallotLeafRefusals(t *testing.T) {
	at := exampleBallotLeaf.ReceivedAt
	for _, tc := range []struct {
		name, ballot, cand, says string
	}{
		{"an id", "soup", "", "is one choice id"},
		{"a string", `"soup"`, "", "not a ballot in canonical form"},
		{"a space", `["a", "b"]`, "", "not a ballot in canonical form"},
		{"keys out of order", `{"soup":3,"salad":2}`, "", "not a ballot in canonical form"},
		{"a score with a leading zero", `{"a":03}`, "", "not a ballot in canonical form"},
		{"an approve mark in capitals", `{"a":"YES"}`, "", "not a ballot in canonical form"},
		{"too long", `["` + strings.Repeat("a", vote.MaxCanonicalLen) + `"]`, "", "at most"},
		{"a candidate beside", `["a"]`, "a", "both candidate_id"},
	} {
		l := audit.Leaf{PollID: "p", Ballot: tc.ballot, CandidateID: tc.cand, PrincipalID: "u", ClientEventID: "e", ReceivedAt: at}
		if _, err := audit.EncodeLeaf(nil, l); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.says)
		}
	}
	good, _ := audit.EncodeLeaf(nil, exampleBallotLeaf)
	for _, tc := range []struct {
		name string
		b    []byte
		says string
	}{
		{"version 5", append([]byte{5}, good[1:]...), "version 5 is not known"},
		{"ballot length past end", append(append([]byte{}, good[:7]...), 0xff, 0xff), "ballot is cut short"},
		{"one byte of length", good[:8], "ballot is cut short"},
		{"an id as ballot", append(append([]byte{}, good[:7]...), append([]byte{0, 4}, "soup"...)...), "is one choice id"},
		{"an empty ballot", append(append([]byte{}, good[:7]...), 0, 0), "not a ballot in canonical form"},
		{"cut", good[:len(good)-1], "received_at takes 8 bytes"},
	} {
		if _, err := audit.DecodeLeaf(tc.b); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.says)
		}
	}
}

// genBallotLeaf draws a valid leaf with a ballot of any kind.
func genBallotLeaf(t *rapid.T) audit.Leaf {
	id := rapid.StringMatching(`[a-z0-9_-]{1,8}`)
	kind := rapid.SampledFrom(vote.Kinds[1:]).Draw(t, "kind")
	choices := rapid.SliceOfNDistinct(id, 0, 5, rapid.ID).Draw(t, "choices")
	b := vote.Ballot{Kind: kind, Choices: choices}
	if kind == vote.KindApprove || kind == vote.KindScore {
		b.Choices = nil
		for _, c := range choices {
			v := rapid.IntRange(0, 2).Draw(t, "mark")
			if kind == vote.KindScore {
				v = rapid.IntRange(0, 1000).Draw(t, "score")
			}
			b.Marks = append(b.Marks, vote.Mark{Choice: c, Value: v})
		}
	}
	canon, err := vote.ParseBallot(kind, []byte(b.Canonical()))
	if err != nil {
		t.Fatalf("drew no ballot: %v", err)
	}
	return audit.Leaf{PollID: id.Draw(t, "poll"), Ballot: canon.Canonical(), PrincipalID: id.Draw(t, "principal"),
		ClientEventID: id.Draw(t, "event"), ReceivedAt: time.UnixMicro(rapid.Int64Range(1, 1<<60).Draw(t, "at")).UTC()}
}

// A verifier earns trust by rejecting: every change of one byte of a
// ballot leaf, a byte cut or added, either is refused or decodes to
// another leaf that encodes back to the changed bytes: no two encodings
// of one leaf, and none that decodes to the leaf it was made from.
func TestDecodeBallotLeafMutations(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		l := genBallotLeaf(t)
		good, err := audit.EncodeLeaf(nil, l)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := audit.DecodeLeaf(good); err != nil || back != l {
			t.Fatalf("round trip: %+v (%v), want %+v", back, err, l)
		}
		for i := range good {
			b := append([]byte{}, good...)
			b[i] ^= byte(rapid.IntRange(1, 255).Draw(t, "xor"))
			mutationRefusedOrOther(t, b, l)
			mutationRefusedOrOther(t, append(append([]byte{}, good[:i]...), good[i+1:]...), l)
		}
		mutationRefusedOrOther(t, append(append([]byte{}, good...), 0), l)
	})
}

func mutationRefusedOrOther(t *rapid.T, b []byte, was audit.Leaf) {
	l, err := audit.DecodeLeaf(b)
	if err != nil {
		return
	}
	if l == was {
		t.Fatalf("%x decodes to the leaf it was changed from", b)
	}
	again, err := audit.EncodeLeaf(nil, l)
	if err != nil || string(again) != string(b) {
		t.Fatalf("%x decodes to %+v, which encodes to %x (%v)", b, l, again, err)
	}
}

// genRulesDefinition draws a valid definition with rules of any kind.
func genRulesDefinition(t *rapid.T) audit.Definition {
	d := exampleDefinition
	d.Choices = rapid.SliceOfNDistinct(rapid.StringMatching(`[a-z]{1,4}`), 1, 6, rapid.ID).Draw(t, "choices")
	d.Rules = genRules(t, len(d.Choices))
	if d.Rules.IsDefault() {
		d.Rules.Answers = vote.AnswersLatest
	}
	return d
}

// genRules draws rules for a poll of n choices, as vote.NewRules makes
// them.
func genRules(t *rapid.T, n int) vote.Rules {
	spec := vote.Spec{Kind: string(rapid.SampledFrom(vote.Kinds).Draw(t, "kind")), Answers: string(rapid.SampledFrom([]vote.Answers{vote.AnswersFinal, vote.AnswersLatest}).Draw(t, "answers"))}
	switch vote.Kind(spec.Kind) {
	case vote.KindMultiple:
		hi := rapid.IntRange(1, n).Draw(t, "max_choices")
		lo := rapid.IntRange(0, hi).Draw(t, "min_choices")
		spec.MinChoices, spec.MaxChoices = &lo, &hi
	case vote.KindScore:
		m := rapid.IntRange(1, 10).Draw(t, "max_score")
		spec.MaxScore = &m
		if rapid.Bool().Draw(t, "has budget") {
			b := rapid.IntRange(1, 30).Draw(t, "budget")
			spec.Budget = &b
		}
	}
	r, err := vote.NewRules(spec, n)
	if err != nil {
		t.Fatalf("drew no rules: %v", err)
	}
	return r
}

// Every change of one byte of a version 3 definition leaf is refused or
// decodes to another definition that encodes back to the changed bytes.
func TestDecodeRulesDefinitionMutations(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		d := genRulesDefinition(t)
		good, err := audit.EncodeDefinition(nil, d)
		if err != nil {
			t.Fatal(err)
		}
		back, err := audit.DecodeDefinition(good)
		if err != nil || back.Rules != d.Rules || strings.Join(back.Choices, ",") != strings.Join(d.Choices, ",") {
			t.Fatalf("round trip: %+v (%v), want %+v", back, err, d)
		}
		for i := range good {
			b := append([]byte{}, good...)
			b[i] ^= byte(rapid.IntRange(1, 255).Draw(t, "xor"))
			definitionRefusedOrOther(t, b, good)
			definitionRefusedOrOther(t, append(append([]byte{}, good[:i]...), good[i+1:]...), good)
		}
		definitionRefusedOrOther(t, append(append([]byte{}, good...), 0), good)
	})
}

func definitionRefusedOrOther(t *rapid.T, b, was []byte) {
	d, err := audit.DecodeDefinition(b)
	if err != nil {
		return
	}
	again, err := audit.EncodeDefinition(nil, d)
	if err != nil || string(again) != string(b) {
		t.Fatalf("%x decodes to %+v, which encodes to %x (%v)", b, d, again, err)
	}
	if string(again) == string(was) {
		t.Fatalf("%x decodes to the definition it was changed from", b)
	}
}

// docs/audit.md gives the examples' bytes, hashes and lines that these
// tests pin, so that a reader of it alone can check a verifier.
func TestDocGivesBallotExamples(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "audit.md"))
	if err != nil {
		t.Fatal(err)
	}
	def := audit.AppendExportLine(nil, audit.ExportRow{PollID: "lunch", RecordedAt: time.Date(2026, 3, 1, 11, 59, 0, 0, time.UTC),
		LeafIndex: new(int64), Definition: &exampleRulesDefinition})
	if vote.MaxCanonicalLen != 4866 {
		t.Errorf("docs/audit.md says a canonical ballot is at most 4,866 bytes; vote.MaxCanonicalLen is %d", vote.MaxCanonicalLen)
	}
	for _, want := range []string{exampleBallotBytes, exampleBallotHash, exampleRulesBytes, exampleRulesHash, strings.TrimSuffix(string(def), "\n")} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("docs/audit.md does not give %s", want)
		}
	}
}
