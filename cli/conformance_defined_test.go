package cli

import (
	"bytes"
	"maps"
	"slices"
	"strings"
	"time"

	"tally/audit"
)

// This file owns the conformance vectors of logs that start with their
// poll's definition (leaf version 2): a second honest ledger, of two
// polls, beside the first (whose logs are from before definitions were
// logged, and keep verifying as version 1), and its cases.

// The defined ledger's base files, in testdata/conformance.
const (
	vectorDefinedExport      = "defined-export.jsonl"
	vectorDefinedCheckpoints = "defined-checkpoints.jsonl"
	vectorDefinedResults     = "defined-results.jsonl"
	vectorTeamEligible       = "team-eligible.txt" // the list team was created with, one id a line
)

// vectorDefinedSizes are the sizes signed of each poll of the defined
// ledger: picnic's definition alone, before any vote, then its votes, and
// the last its full size.
var vectorDefinedSizes = map[string][]int64{"picnic": {1, 5, 8}, "team": {4}}

// vectorPicnicCloses is when picnic was closed: its second definition.
var vectorPicnicCloses = vectorEpoch.Add(25 * time.Minute)

// vectorDefinedRows are the defined ledger's rows in export order:
//
//	1 picnic[0] definition   2 team[0] definition   3-6 picnic[1-4]
//	7-8 team[1-2]   9 picnic[5] definition (closed)   10-11 picnic[6-7]
//	12 team[3]
//
// picnic's last two votes were received before it closed and recorded
// after: a vote counts by when it was received.
func vectorDefinedRows() []audit.ExportRow {
	picnic := audit.Definition{PollID: "picnic", Title: "Where shall the picnic be?", OpensAt: vectorEpoch,
		Choices: []string{"park", "beach", "lake"}}
	closed := picnic
	closed.ClosesAt = &vectorPicnicCloses
	teamCloses := vectorEpoch.Add(time.Hour)
	eligible := audit.EligibleListHash([]string{"alice", "bob", "carol"})
	team := audit.Definition{PollID: "team", Title: "Move the team meeting to Thursdays?", OpensAt: vectorEpoch,
		ClosesAt: &teamCloses, EligibleHash: &eligible, Choices: []string{"yes", "no"}}
	next := map[string]int64{}
	def := func(d audit.Definition, recorded time.Time) audit.ExportRow {
		r := audit.ExportRow{PollID: d.PollID, RecordedAt: recorded, LeafIndex: ptr(next[d.PollID]), Definition: &d}
		next[d.PollID]++
		return r
	}
	votes := func(poll string, vs ...vectorVote) []audit.ExportRow {
		var rows []audit.ExportRow
		recorded := vectorReceivedAt(slices.MaxFunc(vs, func(a, b vectorVote) int { return int(a.seq - b.seq) }).seq).Add(120 * time.Millisecond)
		if poll == "picnic" && next[poll] > 5 {
			recorded = vectorPicnicCloses.Add(3 * time.Second)
		}
		for _, v := range vs {
			rows = append(rows, audit.ExportRow{Seq: v.seq, EventID: vectorEventID(v.principal, poll), PollID: poll,
				CandidateID: v.candidate, PrincipalID: v.principal, ReceivedAt: vectorReceivedAt(v.seq), RecordedAt: recorded,
				LeafIndex: ptr(next[poll])})
			next[poll]++
		}
		return rows
	}
	var rows []audit.ExportRow
	rows = append(rows, def(picnic, vectorEpoch.Add(-10*time.Minute)), def(team, vectorEpoch.Add(-9*time.Minute)))
	rows = append(rows, votes("picnic", vectorVote{31, "alice", "park"}, vectorVote{32, "bob", "beach"}, vectorVote{33, "carol", "park"},
		vectorVote{34, "dave", "lake"})...)
	rows = append(rows, votes("team", vectorVote{37, "alice", "yes"}, vectorVote{38, "bob", "no"})...)
	rows = append(rows, def(closed, vectorPicnicCloses))
	rows = append(rows, votes("picnic", vectorVote{35, "erin", "beach"}, vectorVote{36, "frank", "park"})...)
	rows = append(rows, votes("team", vectorVote{39, "carol", "yes"})...)
	return rows
}

// definedCases are the defined ledger's files and cases.
func (g *vectorGen) definedCases() {
	honest := g.ledgerSigned(vectorDefinedRows(), vectorDefinedSizes)
	g.files[vectorDefinedExport] = honest.export()
	g.files[vectorDefinedCheckpoints] = honest.checkpointsFile()
	g.files[vectorDefinedResults] = resultLines(g.t, honest.results())
	g.base = vectorBase{vectorDefinedExport, vectorDefinedCheckpoints, vectorDefinedResults}
	defer func() { g.base = vectorBase{} }()
	export := string(g.files[vectorDefinedExport])
	over := func(b string) map[string][]byte { return map[string][]byte{vectorDefinedExport: []byte(b)} }
	// signed is the ledger of rows as an operator holding the key would
	// publish it: export, checkpoints signed over it and results, those
	// that differ from the honest ones.
	signed := func(rows []audit.ExportRow) map[string][]byte {
		l := g.ledgerSigned(rows, vectorDefinedSizes)
		files := map[string][]byte{vectorDefinedExport: l.export(), vectorDefinedCheckpoints: l.checkpointsFile(),
			vectorDefinedResults: resultLines(g.t, l.results())}
		maps.DeleteFunc(files, func(name string, b []byte) bool { return bytes.Equal(b, g.files[name]) })
		return files
	}
	edit := func(i int, f func(r *audit.ExportRow)) []audit.ExportRow {
		rows := slices.Clone(honest.rows)
		if rows[i].Definition != nil {
			d := *rows[i].Definition
			d.Choices = slices.Clone(d.Choices)
			rows[i].Definition = &d
		}
		f(&rows[i])
		return rows
	}

	g.verify("defined-honest", "logs that start with their poll's definition: picnic, closed at its leaf 5, and team, "+
		"which a list of principals may answer", nil, ExitOK, nil)

	g.verify("defined-title-changed", "picnic's first definition (line 1) asks another question: its closing definition (line 9) "+
		"now changes the title, and every checkpoint of picnic disagrees",
		over(g.editLine(export, 1, `"title":"Where shall the picnic be?"`, `"title":"Where shall the picnic not be?"`)), ExitCheck,
		[]vectorDiscrepancy{rowField("picnic", 5, "title", 9),
			rootDiffers("picnic", 0, 0, 1), rootDiffers("picnic", 0, 4, 2), rootDiffers("picnic", 0, 7, 3)})

	hexHash := string(audit.AppendExportLine(nil, honest.rows[1]))
	hexHash = hexHash[strings.Index(hexHash, `"eligible_hash":"`)+len(`"eligible_hash":"`):][:64]
	other := strings.Replace(hexHash, hexHash[:1], map[bool]string{true: "1", false: "0"}[hexHash[0] == '0'], 1)
	g.verify("defined-eligible-list-changed", "team's definition (line 2) with one digit of its eligible list's hash changed",
		over(g.editLine(export, 2, hexHash, other)), ExitCheck, []vectorDiscrepancy{rootDiffers("team", 0, 3, 4)})

	rows := edit(8, func(r *audit.ExportRow) { r.Definition.Choices = append(r.Definition.Choices, "pool") })
	rows[9].CandidateID = "pool"
	g.verify("defined-choice-added", "picnic's closing definition (line 9) also offers pool, and erin's vote (line 10) is for pool, "+
		"checkpoints signed over it: the question changed after it was asked",
		signed(rows), ExitCheck, []vectorDiscrepancy{rowField("picnic", 5, "choices", 9)})

	g.verify("defined-vote-not-offered", "bob's picnic vote (line 4) is for pool, which no definition offers; checkpoints signed over it",
		signed(edit(3, func(r *audit.ExportRow) { r.CandidateID = "pool" })), ExitCheck,
		[]vectorDiscrepancy{rowField("picnic", 2, "candidate_id", 4)})

	g.verify("defined-vote-after-close", "frank's picnic vote (line 11) received at the closing time of the definition in force; "+
		"checkpoints signed over it",
		signed(edit(10, func(r *audit.ExportRow) { r.ReceivedAt = vectorPicnicCloses })), ExitCheck,
		[]vectorDiscrepancy{rowField("picnic", 7, "received_at", 11)})

	g.verify("defined-vote-before-open", "alice's picnic vote (line 3) received a second before the poll opened; checkpoints signed over it",
		signed(edit(2, func(r *audit.ExportRow) { r.ReceivedAt = vectorEpoch.Add(-time.Second) })), ExitCheck,
		[]vectorDiscrepancy{rowField("picnic", 1, "received_at", 3)})

	g.verify("defined-unknown-kind", `line 9 says "kind":"amendment": a line of a kind this version does not know is refused, never read as a vote`,
		over(g.editLine(export, 9, `"kind":"definition"`, `"kind":"amendment"`)), ExitError, nil,
		"export line 9", `this version reads kind "definition" only`)

	g.verify("defined-opens-at-changed", "picnic's closing definition (line 9) also opens the poll a minute earlier; checkpoints signed over it: "+
		"a discrepancy named opens_at", signed(edit(8, func(r *audit.ExportRow) { r.Definition.OpensAt = vectorEpoch.Add(-time.Minute) })),
		ExitCheck, []vectorDiscrepancy{rowField("picnic", 5, "opens_at", 9)})

	g.verify("defined-choices-reordered", "picnic's closing definition (line 9) lists the same choices in another order (lake, beach, park); "+
		"checkpoints signed over it: the order is the question's too, a discrepancy named choices",
		signed(edit(8, func(r *audit.ExportRow) { r.Definition.Choices = []string{"lake", "beach", "park"} })),
		ExitCheck, []vectorDiscrepancy{rowField("picnic", 5, "choices", 9)})

	teamHash := audit.EligibleListHash([]string{"alice", "bob", "carol"})
	g.verify("defined-eligibility-added", "picnic's closing definition (line 9) restricts the poll to a list; checkpoints signed over it: "+
		"a discrepancy named eligible_hash", signed(edit(8, func(r *audit.ExportRow) { r.Definition.EligibleHash = &teamHash })),
		ExitCheck, []vectorDiscrepancy{rowField("picnic", 5, "eligible_hash", 9)})

	repeated := slices.Clone(honest.rows)
	repeated = slices.Insert(repeated, 9, repeated[8])
	for i := 9; i < len(repeated); i++ {
		if repeated[i].PollID == "picnic" {
			repeated[i].LeafIndex = ptr(*repeated[i].LeafIndex + 1)
		}
	}
	g.verify("defined-definition-repeated", "picnic's closing definition (line 9) written again as its next leaf (line 10), identical; "+
		"checkpoints and results signed and counted over it: tally never writes a definition that changes nothing",
		signed(repeated), ExitCheck, []vectorDiscrepancy{rowField("picnic", 6, "definition", 10)})

	g.verify("defined-title-lone-surrogate", `picnic's first definition (line 1) has "\ud800" in its title, a lone surrogate that JSON readers `+
		"replace with U+FFFD or refuse, each their own way: refused", over(g.editLine(export, 1, `be?"`, `be\ud800?"`)), ExitError, nil,
		"export line 1", `field "title" escapes a lone surrogate`)

	g.verify("defined-title-not-utf8", "picnic's first definition (line 1) has the byte 0xff, which is not UTF-8, in its title: refused",
		over(g.editLine(export, 1, `be?"`, "be\xff?\"")), ExitError, nil,
		"export line 1", `field "title" holds byte 0xff`)

	g.verify("defined-closes-at-null", `picnic's first definition (line 1) carries "closes_at":null: a poll open until closed leaves closes_at out`,
		over(g.editLine(export, 1, `"choices":`, `"closes_at":null,"choices":`)), ExitError, nil,
		"export line 1", `field "closes_at" is null`)

	g.verify("defined-eligible-hash-null", `picnic's first definition (line 1) carries "eligible_hash":null: a poll any principal may answer leaves it out`,
		over(g.editLine(export, 1, `"choices":`, `"eligible_hash":null,"choices":`)), ExitError, nil,
		"export line 1", `field "eligible_hash" is null`)

	g.files[vectorTeamEligible] = []byte("alice\nbob\ncarol\n")
	team := map[string]string{"team": vectorTeamEligible}
	g.verifyEligible("defined-eligible", "team's eligible list given (--eligible team=team-eligible.txt): it hashes to the eligible_hash "+
		"of team's definition, and every vote of team is of a principal on it", nil, team, ExitOK, nil)

	g.verifyEligible("defined-eligible-voter-not-listed", "team's third vote (line 12) is dave's, who is not on its list; checkpoints signed over it, "+
		"the list given", signed(edit(11, func(r *audit.ExportRow) { r.PrincipalID, r.EventID = "dave", vectorEventID("dave", "team") })), team,
		ExitCheck, []vectorDiscrepancy{rowField("team", 3, "principal_id", 12)})

	g.verify("defined-eligible-voter-not-listed-no-list", "the same export without --eligible: the export commits the list by its hash "+
		"alone, so the audit cannot tell an eligible voter from another and finds nothing",
		signed(edit(11, func(r *audit.ExportRow) { r.PrincipalID, r.EventID = "dave", vectorEventID("dave", "team") })), ExitOK, nil)

	g.verifyEligible("defined-eligible-other-list", "a list of alice and bob given for team: it is not the list team's definition (line 2) commits, "+
		"and the votes are not checked against it", map[string][]byte{vectorTeamEligible: []byte("alice\nbob\n")}, team,
		ExitCheck, []vectorDiscrepancy{rowField("team", 0, "eligible_hash", 2)})

	g.verifyEligible("defined-eligible-unrestricted-poll", "team's list given for picnic, which any principal may answer: "+
		"each of picnic's definitions (lines 1, 9) takes any principal", nil, map[string]string{"picnic": vectorTeamEligible},
		ExitCheck, []vectorDiscrepancy{rowField("picnic", 0, "eligible_hash", 1), rowField("picnic", 5, "eligible_hash", 9)})

	g.verifyEligible("defined-eligible-poll-not-in-export", "a list given for poll lunch, which this export does not hold: "+
		"the auditor named another poll than they meant", nil, map[string]string{"lunch": vectorTeamEligible},
		ExitError, nil, "eligible list is given for poll lunch, which the export does not hold")

	g.verifyEligible("defined-eligible-id-twice", "team's list names bob twice (lines 2 and 3): each principal is listed once",
		map[string][]byte{vectorTeamEligible: []byte("alice\nbob\nbob\ncarol\n")}, team,
		ExitError, nil, "line 3: principal bob is listed on line 2 too")

	g.verifyEligible("defined-eligible-empty", "team's list file holds no id: refused, not read as a list of no one",
		map[string][]byte{vectorTeamEligible: []byte("\n")}, team, ExitError, nil, "the list names no principal")

	lines := strings.SplitAfter(export, "\n")
	lines = lines[:len(lines)-1]
	g.verify("defined-definition-deleted", "picnic's first definition (line 1) deleted: its rows' leaf_index, every checkpoint of picnic "+
		"and the results' tree_size disagree",
		over(strings.Join(lines[1:], "")), ExitCheck, []vectorDiscrepancy{
			rowField("picnic", 0, "definition", 2), rowField("picnic", 0, "leaf_index", 2), rowField("picnic", 1, "leaf_index", 3), rowField("picnic", 2, "leaf_index", 4),
			rowField("picnic", 3, "leaf_index", 5), rowField("picnic", 4, "leaf_index", 8), rowField("picnic", 5, "leaf_index", 9),
			rowField("picnic", 6, "leaf_index", 10),
			rootDiffers("picnic", 0, 0, 1), rootDiffers("picnic", 0, 4, 2), rootDiffers("picnic", 7, 7, 3), resultsField("picnic", "tree_size")})

	// picnic's first definition removed, the rest renumbered, and every
	// file signed and counted again over the shorter log: only the rule
	// that a poll's log begins with its definition sees it.
	var shorter []audit.ExportRow
	for _, r := range honest.rows[1:] {
		if r.PollID == "picnic" {
			r.LeafIndex = ptr(*r.LeafIndex - 1)
		}
		shorter = append(shorter, r)
	}
	resigned := g.ledgerSigned(shorter, map[string][]int64{"picnic": {4, 7}, "team": {4}})
	g.verify("defined-first-definition-removed-resigned", "picnic's first definition (line 1) removed, its later leaves renumbered, "+
		"its checkpoints signed again (sizes 4 and 7) and its results counted over the shorter log: a log that begins with a vote "+
		"is refused unless its poll is named as from before definitions",
		map[string][]byte{vectorDefinedExport: resigned.export(), vectorDefinedCheckpoints: resigned.checkpointsFile(),
			vectorDefinedResults: resultLines(g.t, resigned.results())},
		ExitCheck, []vectorDiscrepancy{rowField("picnic", 0, "definition", 2)})

	g.verify("defined-named-before-definitions", "picnic named with --before-definitions, though its log begins with its definition: "+
		"the name only allows a log to begin with votes, so nothing changes", nil, ExitOK, nil)
	g.cases[len(g.cases)-1].BeforeDefinitions = []string{"picnic"}

	g.verify("defined-before-definitions-poll-not-in-export", "lunch named with --before-definitions, a poll this export does not hold: "+
		"refused, as a typo would be", nil, ExitError, nil, "poll lunch is named as from before definitions, but the export does not hold it")
	g.cases[len(g.cases)-1].BeforeDefinitions = []string{"lunch"}

	g.base = vectorBase{}
	g.before = nil
	g.verify("export-before-definitions-not-named", "the honest first ledger, whose logs are from before definitions, without "+
		"--before-definitions: each poll's log begins with a vote, which a poll created since definitions are logged never does",
		nil, ExitCheck, []vectorDiscrepancy{rowField("lunch", 0, "definition", 1), rowField("dinner", 0, "definition", 4),
			rowField("board", 0, "definition", 6)})
	g.before = vectorLegacyPolls
	g.verifyEligible("eligible-poll-without-definition", "team's list given for lunch of the first ledger, whose log holds no definition: "+
		"none commits a list to check it against", nil, map[string]string{"lunch": vectorTeamEligible},
		ExitCheck, []vectorDiscrepancy{resultsField("lunch", "eligible_hash")})
}
