package audit_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"tally/audit"
	"tally/vote"
)

// This file owns the conformance vectors of ballot kinds, in
// testdata/conformance-ballots: an honest ledger of five polls, one of
// each kind (a ranked one and a single-choice one of latest answers), the
// files tally would publish for it, and tampered cases each with the
// verdict tally audit verify must give, in the manifest form of the
// repository's other vectors (testdata/conformance/vectors.json). The
// verdicts are written here by hand, never taken from the verifier; the
// honest results are counted with package vote, not with the audit.
// TestBallotVectorsUpToDate checks the files are what this generator
// writes (-update-ballot-vectors rewrites them); TestBallotVectors runs
// every case as tally audit verify --format json does.

var updateBallotVectors = flag.Bool("update-ballot-vectors", false, "rewrite testdata/conformance-ballots from its generator")

const ballotVectorDir = "testdata/conformance-ballots"

// The vectors' key: the same as the repository's other vectors, its
// Ed25519 seed SHA-256 of the seed text.
const (
	ballotVectorLog     = "conformance.tally.example"
	ballotVectorKeySeed = "tally conformance vectors: log key"
)

var (
	ballotVectorEpoch  = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	ballotVectorCloses = ballotVectorEpoch.Add(time.Hour)
)

// ballotVectorReceivedAt is when intake received the vote of seq, with
// microseconds that are never zero.
func ballotVectorReceivedAt(seq int64) time.Time {
	return ballotVectorEpoch.Add(time.Duration(seq)*41*time.Second + time.Duration(seq*390151%1_000_000)*time.Microsecond)
}

// ballotPoll is one poll of the honest ledger.
type ballotPoll struct {
	id      string
	title   string
	choices []string
	rules   vote.Rules
	votes   []ballotVectorVote
}

// ballotVectorVote is one vote: its principal and its ballot (a choice
// id for a single-choice poll), in canonical form.
type ballotVectorVote struct{ principal, ballot string }

var ballotPolls = []ballotPoll{
	{"toppings", "Which toppings, two at most?", []string{"ham", "olive", "basil"},
		vote.Rules{Kind: vote.KindMultiple, MinChoices: 1, MaxChoices: 2, Answers: vote.AnswersFinal},
		[]ballotVectorVote{{"alice", `["ham","olive"]`}, {"bob", `["basil"]`}, {"carol", `["basil","olive"]`}, {"dave", `["ham"]`}}},
	{"menu", "Keep these dishes?", []string{"soup", "salad", "stew"},
		vote.Rules{Kind: vote.KindApprove, Answers: vote.AnswersFinal},
		[]ballotVectorVote{{"alice", `{"salad":"no","soup":"yes"}`}, {"bob", `{"soup":"yes","stew":"abstain"}`}, {"carol", `{"salad":"yes","soup":"no","stew":"no"}`}}},
	{"talks", "Rate the talks (5 at most, 8 in all)", []string{"t1", "t2", "t3"},
		vote.Rules{Kind: vote.KindScore, MaxScore: 5, Budget: 8, Answers: vote.AnswersFinal},
		[]ballotVectorVote{{"alice", `{"t1":5,"t2":3}`}, {"bob", `{"t1":0,"t2":4,"t3":4}`}, {"erin", `{"t3":2}`}}},
	{"venue", "Rank the venues", []string{"park", "beach", "lake"},
		vote.Rules{Kind: vote.KindRanked, Answers: vote.AnswersLatest},
		[]ballotVectorVote{{"alice", `["park","beach"]`}, {"bob", `["lake"]`}, {"carol", `["park","lake","beach"]`},
			{"alice", `["beach","lake","park"]`}, {"dave", `["beach"]`}, {"bob", `["lake","beach"]`}}},
	{"snack", "Which snack?", []string{"chips", "fruit"},
		vote.Rules{Kind: vote.KindSingle, Answers: vote.AnswersLatest},
		[]ballotVectorVote{{"alice", "chips"}, {"bob", "fruit"}, {"alice", "fruit"}}},
}

// ballotVectorRows are the honest ledger's rows in export order: each
// poll's definition, then the polls' votes a round at a time (the first
// vote of each poll, then the second, ...), so that the polls
// interleave.
func ballotVectorRows() []audit.ExportRow {
	var rows []audit.ExportRow
	next := map[string]int64{}
	leaf := func(poll string) *int64 { i := next[poll]; next[poll]++; return &i }
	for _, p := range ballotPolls {
		d := &audit.Definition{PollID: p.id, Title: p.title, OpensAt: ballotVectorEpoch, ClosesAt: &ballotVectorCloses, Choices: p.choices, Rules: p.rules}
		rows = append(rows, audit.ExportRow{PollID: p.id, RecordedAt: ballotVectorEpoch.Add(-time.Minute), LeafIndex: leaf(p.id), Definition: d})
	}
	seq := int64(0)
	for round := 0; ; round++ {
		added := false
		for _, p := range ballotPolls {
			if round >= len(p.votes) {
				continue
			}
			added = true
			seq++
			v := p.votes[round]
			r := audit.ExportRow{Seq: seq, EventID: fmt.Sprintf("%s-%s-%d", p.id, v.principal, round), PollID: p.id, PrincipalID: v.principal,
				ReceivedAt: ballotVectorReceivedAt(seq), RecordedAt: ballotVectorReceivedAt(seq).Add(120 * time.Millisecond), LeafIndex: leaf(p.id)}
			if p.rules.Kind == vote.KindSingle {
				r.CandidateID = v.ballot
			} else {
				r.Ballot = v.ballot
			}
			rows = append(rows, r)
		}
		if !added {
			return rows
		}
	}
}

// ballotVectorResults are each poll's results as intake answers them,
// counted with package vote from the ballots that count (each
// principal's first, or in a latest poll its last).
func ballotVectorResults(t *testing.T) []audit.PublishedResults {
	var out []audit.PublishedResults
	for _, p := range ballotPolls {
		counts := map[string]vote.Ballot{}
		var order []string
		for _, v := range p.votes {
			b, err := vote.ParseCanonical(p.rules.Kind, v.ballot)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := counts[v.principal]; !ok {
				order = append(order, v.principal)
			} else if p.rules.Answers == vote.AnswersFinal {
				continue
			}
			counts[v.principal] = b
		}
		c := vote.NewCount(p.rules.Kind, p.choices)
		for _, who := range order {
			c.Add(counts[who], 1)
		}
		size := int64(1 + len(p.votes))
		pub := audit.PublishedResults{PollID: p.id, Total: c.Total(), TreeSize: &size, Ballots: &c.Ballots}
		for i, id := range p.choices {
			f := c.Figures[i]
			tl := audit.Tally{CandidateID: id, Votes: f.Votes}
			switch p.rules.Kind {
			case vote.KindApprove:
				tl.Yes, tl.No, tl.Abstain = &f.Yes, &f.No, &f.Abstain
			case vote.KindScore:
				tl.Score = &f.Score
			case vote.KindRanked:
				tl.Borda = &f.Borda
			}
			pub.Results = append(pub.Results, tl)
		}
		if p.rules.Kind == vote.KindRanked {
			pub.Pairwise = map[string]map[string]int64{}
			for i, a := range p.choices {
				pub.Pairwise[a] = map[string]int64{}
				for j, b := range p.choices {
					if i != j {
						pub.Pairwise[a][b] = c.Beats(i, j)
					}
				}
			}
			w, _ := c.CondorcetWinner()
			pub.CondorcetWinner = &audit.Winner{ID: w}
		}
		out = append(out, pub)
	}
	return out
}

// The manifest, in the form of testdata/conformance/vectors.json.
type ballotManifest struct {
	About   string       `json:"about"`
	Log     string       `json:"log"`
	KeySeed string       `json:"key_seed"`
	Cases   []ballotCase `json:"cases"`
}

type ballotCase struct {
	Name          string             `json:"name"`
	About         string             `json:"about"`
	Command       string             `json:"command"`
	Files         ballotCaseFiles    `json:"files"`
	Exit          int                `json:"exit"`
	Fields        *[]string          `json:"fields,omitempty"`
	Discrepancies []ballotCaseResult `json:"discrepancies,omitempty"`
	ErrorContains []string           `json:"error_contains,omitempty"`
}

type ballotCaseFiles struct {
	Export      string `json:"export"`
	Checkpoints string `json:"checkpoints"`
	Key         string `json:"key"`
	Results     string `json:"results,omitempty"`
}

type ballotCaseResult struct {
	PollID     string           `json:"poll_id"`
	Leaves     *audit.LeafRange `json:"leaves,omitempty"`
	Field      string           `json:"field,omitempty"`
	ExportLine int              `json:"export_line,omitempty"`
}

// ballotGen writes the vectors' files.
type ballotGen struct {
	t      *testing.T
	signer note.Signer
	key    string
	files  map[string][]byte
	cases  []ballotCase
}

func (g *ballotGen) exportFile(rows []audit.ExportRow) []byte {
	var b []byte
	for _, r := range rows {
		b = audit.AppendExportLine(b, r)
	}
	return b
}

// checkpointsFile signs each poll's tree built from rows at size 1 (its
// definition alone) and at its full size.
func (g *ballotGen) checkpointsFile(rows []audit.ExportRow) []byte {
	trees := map[string]*audit.Tree{}
	var polls []string
	for _, r := range rows {
		tr := trees[r.PollID]
		if tr == nil {
			tr = &audit.Tree{}
			trees[r.PollID] = tr
			polls = append(polls, r.PollID)
		}
		var err error
		if r.Definition != nil {
			h, herr := audit.DefinitionHash(*r.Definition)
			if herr != nil {
				g.t.Fatal(herr)
			}
			err = tr.Append(h)
		} else {
			err = tr.AppendLeaf(r.Leaf())
		}
		if err != nil {
			g.t.Fatal(err)
		}
	}
	slices.Sort(polls)
	var buf bytes.Buffer
	for _, p := range polls {
		for _, size := range []int64{1, trees[p].Size()} {
			root, err := trees[p].Root(size)
			if err != nil {
				g.t.Fatal(err)
			}
			n, err := audit.SignCheckpoint(g.signer, audit.Origin(ballotVectorLog, p), size, root)
			if err != nil {
				g.t.Fatal(err)
			}
			if err := audit.WriteCheckpoint(&buf, audit.StoredCheckpoint{PollID: p, Size: size, Checkpoint: string(n)}); err != nil {
				g.t.Fatal(err)
			}
		}
	}
	return buf.Bytes()
}

func resultsFile(t *testing.T, results []audit.PublishedResults) []byte {
	var b []byte
	for _, r := range results {
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b = append(append(b, line...), '\n')
	}
	return b
}

// exportCase adds a case of a tampered export, its checkpoints signed
// over it (so that only what the lines say can show it), without
// results.
func (g *ballotGen) exportCase(name, about string, rows []audit.ExportRow, exit int, found []ballotCaseResult, errs ...string) {
	dir := "tampered/" + name + "/"
	g.files[dir+"export.jsonl"] = g.exportFile(rows)
	g.files[dir+"checkpoints.jsonl"] = g.checkpointsFile(rows)
	g.add(ballotCase{Name: name, About: about, Command: "verify",
		Files: ballotCaseFiles{Export: dir + "export.jsonl", Checkpoints: dir + "checkpoints.jsonl", Key: "verifier.key"}}, exit, found, errs)
}

// rawExportCase adds a case of an export whose line is not one tally
// writes: the line n (from 1) of the honest export replaced by line.
func (g *ballotGen) rawExportCase(name, about string, n int, line string, errs ...string) {
	lines := strings.SplitAfter(string(g.files["export.jsonl"]), "\n")
	lines[n-1] = line + "\n"
	dir := "tampered/" + name + "/"
	g.files[dir+"export.jsonl"] = []byte(strings.Join(lines, ""))
	g.add(ballotCase{Name: name, About: about, Command: "verify",
		Files: ballotCaseFiles{Export: dir + "export.jsonl", Checkpoints: "checkpoints.jsonl", Key: "verifier.key"}}, 2, nil, errs)
}

// resultsCase adds a case of the honest export with changed results.
func (g *ballotGen) resultsCase(name, about string, edit func(rs []audit.PublishedResults), exit int, found []ballotCaseResult, errs ...string) {
	rs := ballotVectorResults(g.t)
	edit(rs)
	dir := "tampered/" + name + "/"
	g.files[dir+"results.jsonl"] = resultsFile(g.t, rs)
	g.add(ballotCase{Name: name, About: about, Command: "verify",
		Files: ballotCaseFiles{Export: "export.jsonl", Checkpoints: "checkpoints.jsonl", Key: "verifier.key", Results: dir + "results.jsonl"}}, exit, found, errs)
}

func (g *ballotGen) add(c ballotCase, exit int, found []ballotCaseResult, errs []string) {
	c.Exit, c.Discrepancies, c.ErrorContains = exit, found, errs
	if exit == 1 {
		fields := []string{}
		for _, d := range found {
			if d.Field != "" && !slices.Contains(fields, d.Field) {
				fields = append(fields, d.Field)
			}
		}
		slices.Sort(fields)
		c.Fields = &fields
	}
	g.cases = append(g.cases, c)
}

// lineOf is the export line (from 1) of poll's leaf in rows.
func lineOf(rows []audit.ExportRow, poll string, leaf int64) int {
	for i, r := range rows {
		if r.PollID == poll && r.LeafIndex != nil && *r.LeafIndex == leaf {
			return i + 1
		}
	}
	panic("no such leaf")
}

func at(rows []audit.ExportRow, poll string, leaf int64, field string) ballotCaseResult {
	return ballotCaseResult{PollID: poll, Leaves: &audit.LeafRange{First: leaf, Last: leaf}, Field: field, ExportLine: lineOf(rows, poll, leaf)}
}

// edited is rows with poll's leaf changed by edit.
func edited(poll string, leaf int64, edit func(r *audit.ExportRow)) []audit.ExportRow {
	rows := ballotVectorRows()
	r := &rows[lineOf(rows, poll, leaf)-1]
	edit(r)
	return rows
}

// appended is rows with row added at the end, as its poll's next leaf.
func appended(row audit.ExportRow) []audit.ExportRow {
	rows := ballotVectorRows()
	var n int64
	for _, r := range rows {
		if r.PollID == row.PollID {
			n++
		}
	}
	row.LeafIndex = &n
	row.Seq = int64(len(rows) + 100)
	if row.Definition == nil {
		row.RecordedAt = row.ReceivedAt.Add(time.Second)
	}
	return append(rows, row)
}

func ballotVectorFiles(t *testing.T) map[string][]byte {
	seed := sha256.Sum256([]byte(ballotVectorKeySeed))
	pub := ed25519.NewKeyFromSeed(seed[:]).Public().(ed25519.PublicKey)
	vkey, err := note.NewEd25519VerifierKey(ballotVectorLog, pub)
	if err != nil {
		t.Fatal(err)
	}
	hash := strings.Split(vkey, "+")[1]
	signer, err := audit.NewSigner("PRIVATE+KEY+" + ballotVectorLog + "+" + hash + "+" + base64.StdEncoding.EncodeToString(append([]byte{1}, seed[:]...)))
	if err != nil {
		t.Fatal(err)
	}
	g := &ballotGen{t: t, signer: signer, key: vkey, files: map[string][]byte{}}
	honest := ballotVectorRows()
	g.files["export.jsonl"] = g.exportFile(honest)
	g.files["checkpoints.jsonl"] = g.checkpointsFile(honest)
	g.files["verifier.key"] = []byte(vkey + "\n")
	g.files["results.jsonl"] = resultsFile(t, ballotVectorResults(t))
	g.add(ballotCase{Name: "honest", About: "the export, checkpoints and results of five polls, one of each kind, as tally publishes them", Command: "verify",
		Files: ballotCaseFiles{Export: "export.jsonl", Checkpoints: "checkpoints.jsonl", Key: "verifier.key", Results: "results.jsonl"}}, 0, nil, nil)

	ballot := func(b string) func(r *audit.ExportRow) { return func(r *audit.ExportRow) { r.Ballot = b } }
	rows := edited("talks", 1, ballot(`{"t1":5,"t2":4}`))
	g.exportCase("score-over-budget", "alice's talks ballot (leaf 1) spends 9 points, over the budget of 8", rows, 1, []ballotCaseResult{at(rows, "talks", 1, "ballot")})
	rows = edited("talks", 2, ballot(`{"t1":0,"t2":6}`))
	g.exportCase("score-over-max", "bob's talks ballot (leaf 2) scores t2 6, above max_score 5", rows, 1, []ballotCaseResult{at(rows, "talks", 2, "ballot")})
	rows = edited("toppings", 2, ballot(`["basil","basil"]`))
	g.exportCase("multiple-choice-twice", "bob's toppings ballot (leaf 2) names basil twice", rows, 1, []ballotCaseResult{at(rows, "toppings", 2, "ballot")})
	rows = edited("toppings", 3, ballot(`["basil","ham","olive"]`))
	g.exportCase("multiple-too-many", "carol's toppings ballot (leaf 3) holds three choices, max_choices is 2", rows, 1, []ballotCaseResult{at(rows, "toppings", 3, "ballot")})
	rows = edited("toppings", 4, ballot(`[]`))
	g.exportCase("multiple-too-few", "dave's toppings ballot (leaf 4) holds none, min_choices is 1", rows, 1, []ballotCaseResult{at(rows, "toppings", 4, "ballot")})
	rows = edited("menu", 2, ballot(`{"pie":"yes","soup":"yes"}`))
	g.exportCase("approve-choice-not-offered", "bob's menu ballot (leaf 2) marks pie, which the poll does not offer", rows, 1, []ballotCaseResult{at(rows, "menu", 2, "ballot")})
	rows = edited("menu", 1, ballot(`["soup"]`))
	g.exportCase("approve-wrong-shape", "alice's menu ballot (leaf 1) is an array, a multiple ballot's shape", rows, 1, []ballotCaseResult{at(rows, "menu", 1, "ballot")})
	rows = edited("venue", 3, ballot(`["park","lake","park"]`))
	g.exportCase("ranked-choice-twice", "carol's venue ballot (leaf 3) ranks park twice", rows, 1, []ballotCaseResult{at(rows, "venue", 3, "ballot")})
	rows = edited("venue", 2, func(r *audit.ExportRow) { r.Ballot, r.CandidateID = "", "lake" })
	g.exportCase("candidate-in-ranked-poll", "bob's venue vote (leaf 2) is a vote of one choice, candidate_id, in a ranked poll", rows, 1, []ballotCaseResult{at(rows, "venue", 2, "candidate_id")})
	rows = edited("snack", 2, func(r *audit.ExportRow) { r.Ballot, r.CandidateID = `["fruit"]`, "" })
	g.exportCase("ballot-in-single-poll", "bob's snack vote (leaf 2) carries a ballot in a single-choice poll", rows, 1, []ballotCaseResult{at(rows, "snack", 2, "ballot")})
	rows = appended(audit.ExportRow{EventID: "toppings-alice-again", PollID: "toppings", PrincipalID: "alice", Ballot: `["basil"]`, ReceivedAt: ballotVectorReceivedAt(40)})
	g.exportCase("final-second-ballot", "alice answers toppings, a poll of final answers, a second time (leaf 5)", rows, 1, []ballotCaseResult{at(rows, "toppings", 5, "principal_id")})
	rows = appended(audit.ExportRow{EventID: "venue-dave-late", PollID: "venue", PrincipalID: "dave", Ballot: `["lake","park"]`, ReceivedAt: ballotVectorCloses.Add(5 * time.Second)})
	g.exportCase("latest-changed-after-close", "dave's venue ballot (leaf 7) replaces his, received after the poll closed", rows, 1, []ballotCaseResult{at(rows, "venue", 7, "received_at")})
	rows = appended(audit.ExportRow{EventID: "venue-erin", PollID: "venue", PrincipalID: "erin", Ballot: `["lake"]`, ReceivedAt: ballotVectorReceivedAt(41)})
	g.exportCase("latest-new-voter", "erin ranks venue (leaf 7) before the close: honest, its checkpoints signed over it", rows, 0, nil)
	changed := func(poll string, edit func(d *audit.Definition)) []audit.ExportRow {
		for _, r := range ballotVectorRows() {
			if r.PollID == poll && r.Definition != nil {
				d := *r.Definition
				edit(&d)
				return appended(audit.ExportRow{PollID: poll, RecordedAt: ballotVectorEpoch.Add(30 * time.Minute), Definition: &d})
			}
		}
		panic("no definition")
	}
	rows = changed("talks", func(d *audit.Definition) { d.Rules.Budget = 10 })
	g.exportCase("rules-changed", "a second definition of talks (leaf 4) raises its budget to 10", rows, 1, []ballotCaseResult{at(rows, "talks", 4, "ballot")})
	rows = changed("venue", func(d *audit.Definition) { d.Rules.Answers = vote.AnswersFinal })
	g.exportCase("answers-changed", "a second definition of venue (leaf 7) makes its answers final", rows, 1, []ballotCaseResult{at(rows, "venue", 7, "answers")})
	line := lineOf(honest, "toppings", 1)
	g.rawExportCase("ballot-not-canonical", "alice's toppings ballot written with a space, [\"ham\", \"olive\"]", line,
		strings.Replace(strings.TrimSuffix(string(audit.AppendExportLine(nil, honest[line-1])), "\n"), `["ham","olive"]`, `["ham", "olive"]`, 1),
		fmt.Sprintf("export line %d", line), "not in canonical form")
	g.rawExportCase("ballot-as-string", "alice's toppings ballot written as a JSON string", line,
		strings.Replace(strings.TrimSuffix(string(audit.AppendExportLine(nil, honest[line-1])), "\n"), `["ham","olive"]`, `"[\"ham\",\"olive\"]"`, 1),
		fmt.Sprintf("export line %d", line), "an array or an object")
	g.rawExportCase("definition-default-rules-written", "the snack definition's line says ballot single, answers final: the default, which a line leaves out", 5,
		strings.Replace(strings.TrimSuffix(string(audit.AppendExportLine(nil, honest[4])), "\n"), `"answers":"latest"`, `"answers":"final"`, 1),
		"export line 5", "leaves both out")

	poll := func(rs []audit.PublishedResults, id string) *audit.PublishedResults {
		for i := range rs {
			if rs[i].PollID == id {
				return &rs[i]
			}
		}
		panic("no results")
	}
	g.resultsCase("results-borda-changed", "venue's results give beach 6 Borda points; the recount gives 5", func(rs []audit.PublishedResults) {
		*poll(rs, "venue").Results[1].Borda = 6
	}, 1, []ballotCaseResult{{PollID: "venue", Field: "borda"}})
	g.resultsCase("results-pairwise-changed", "venue's results say 3 ballots rank park above lake; the recount says 1", func(rs []audit.PublishedResults) {
		poll(rs, "venue").Pairwise["park"]["lake"] = 3
	}, 1, []ballotCaseResult{{PollID: "venue", Field: "pairwise"}})
	g.resultsCase("results-condorcet-winner-changed", "venue's results name park its Condorcet winner; the recount has none (beach and lake tie), null", func(rs []audit.PublishedResults) {
		poll(rs, "venue").CondorcetWinner = &audit.Winner{ID: "park"}
	}, 1, []ballotCaseResult{{PollID: "venue", Field: "condorcet_winner"}})
	g.resultsCase("results-superseded-counted", "venue's results count alice's first ballot too, which her second replaced: park 2 first preferences, a total of 5, 5 ballots", func(rs []audit.PublishedResults) {
		v := poll(rs, "venue")
		v.Results[0].Votes++
		v.Total++
		*v.Ballots++
	}, 1, []ballotCaseResult{{PollID: "venue", Field: "votes"}, {PollID: "venue", Field: "total"}, {PollID: "venue", Field: "ballots"}})
	g.resultsCase("results-approve-no-changed", "menu's results give salad no 0; the recount gives 1", func(rs []audit.PublishedResults) {
		*poll(rs, "menu").Results[1].No = 0
	}, 1, []ballotCaseResult{{PollID: "menu", Field: "no"}})
	g.resultsCase("results-score-changed", "talks' results give t3 a score sum of 7; the recount gives 6", func(rs []audit.PublishedResults) {
		*poll(rs, "talks").Results[2].Score = 7
	}, 1, []ballotCaseResult{{PollID: "talks", Field: "score"}})
	g.resultsCase("results-single-latest-both-counted", "snack's results count alice's chips, which her fruit replaced", func(rs []audit.PublishedResults) {
		s := poll(rs, "snack")
		s.Results[0].Votes++
		s.Total++
		*s.Ballots++
	}, 1, []ballotCaseResult{{PollID: "snack", Field: "votes"}, {PollID: "snack", Field: "total"}, {PollID: "snack", Field: "ballots"}})
	g.resultsCase("results-borda-missing", "venue's results leave out lake's borda: not results of a ranked poll", func(rs []audit.PublishedResults) {
		poll(rs, "venue").Results[2].Borda = nil
	}, 2, nil, "results object 4", `lacks "borda"`)
	g.resultsCase("results-ballots-missing", "toppings' results leave out ballots: not results of a multiple poll", func(rs []audit.PublishedResults) {
		poll(rs, "toppings").Ballots = nil
	}, 2, nil, "results object 1", `lack "ballots"`)
	g.resultsCase("results-figure-of-another-kind", "talks' results give t1 a borda: not results of a score poll", func(rs []audit.PublishedResults) {
		poll(rs, "talks").Results[0].Borda = new(int64)
	}, 2, nil, "results object 3", `gives "borda"`)

	m, err := json.MarshalIndent(ballotManifest{
		About: "Conformance vectors of ballot kinds for tally audit verify (docs/audit.md); each case's files are relative to this directory.",
		Log:   ballotVectorLog, KeySeed: ballotVectorKeySeed, Cases: g.cases}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	g.files["vectors.json"] = append(m, '\n')
	return g.files
}

func TestBallotVectorsUpToDate(t *testing.T) {
	files := ballotVectorFiles(t)
	if *updateBallotVectors {
		if err := os.RemoveAll(filepath.Join(ballotVectorDir, "tampered")); err != nil {
			t.Fatal(err)
		}
		for name, b := range files {
			path := filepath.Join(ballotVectorDir, filepath.FromSlash(name))
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		got, err := os.ReadFile(filepath.Join(ballotVectorDir, name))
		if err != nil || !bytes.Equal(got, files[name]) {
			t.Errorf("%s/%s is not what the generator writes (%v); if the change is meant, go test ./audit -run TestBallotVectorsUpToDate -update-ballot-vectors rewrites it", ballotVectorDir, name, err)
		}
	}
	err := filepath.WalkDir(ballotVectorDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		name := filepath.ToSlash(strings.TrimPrefix(path, ballotVectorDir+string(filepath.Separator)))
		if _, ok := files[name]; !ok && name != "README.md" {
			t.Errorf("%s/%s is not written by the generator; remove it, or -update-ballot-vectors does", ballotVectorDir, name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestBallotVectors runs every case as tally audit verify --format json
// does: the checkpoints file and the results read, the export verified
// with the key; exit 2 for an error, 1 for discrepancies, 0 otherwise.
func TestBallotVectors(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(ballotVectorDir, "vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m ballotManifest
	if err := json.Unmarshal(b, &m); err != nil || len(m.Cases) == 0 {
		t.Fatalf("vectors.json: %v, %d cases", err, len(m.Cases))
	}
	for _, c := range m.Cases {
		t.Run(c.Name, func(t *testing.T) {
			exit, errText, rep := runBallotCase(t, c.Files)
			if exit != c.Exit {
				t.Fatalf("%s: exit %d, want %d (%s; %v)", c.About, exit, c.Exit, errText, rep.Discrepancies)
			}
			for _, p := range c.ErrorContains {
				if !strings.Contains(errText, p) {
					t.Errorf("the error does not say %q: %s", p, errText)
				}
			}
			got := []ballotCaseResult{}
			for _, d := range rep.Discrepancies {
				got = append(got, ballotCaseResult{d.PollID, d.Leaves, d.Field, d.ExportLine})
			}
			want := c.Discrepancies
			if want == nil {
				want = []ballotCaseResult{}
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s: discrepancies %+v, want %+v (%v)", c.About, got, want, rep.Discrepancies)
			}
		})
	}
}

func runBallotCase(t *testing.T, f ballotCaseFiles) (int, string, audit.Report) {
	path := func(p string) string { return filepath.Join(ballotVectorDir, filepath.FromSlash(p)) }
	fail := func(err error) (int, string, audit.Report) { return 2, err.Error(), audit.Report{} }
	key, err := os.ReadFile(path(f.Key))
	if err != nil {
		t.Fatal(err)
	}
	v, err := audit.NewVerifier(strings.TrimSpace(string(key)))
	if err != nil {
		return fail(err)
	}
	cpFile, err := os.Open(path(f.Checkpoints))
	if err != nil {
		t.Fatal(err)
	}
	defer cpFile.Close()
	cps, err := audit.ReadCheckpoints(cpFile)
	if err != nil {
		return fail(err)
	}
	var results []audit.PublishedResults
	if f.Results != "" {
		rf, err := os.Open(path(f.Results))
		if err != nil {
			t.Fatal(err)
		}
		defer rf.Close()
		if results, err = audit.ReadResults(rf); err != nil {
			return fail(err)
		}
	}
	export, err := os.Open(path(f.Export))
	if err != nil {
		t.Fatal(err)
	}
	defer export.Close()
	rep, err := audit.VerifyExport(export, cps, []note.Verifier{v}, results)
	if err != nil {
		return fail(err)
	}
	if !rep.OK() {
		return 1, "", rep
	}
	return 0, "", rep
}
