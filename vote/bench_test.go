package vote

import "testing"

// The canonical ballots of P-score's and P-ranked's loads (4 choices), as
// the projector's path reads each of them several times.
var benchBallots = []struct {
	kind Kind
	s    string
}{
	{KindScore, `{"a":3,"b":4,"c":5,"d":0}`},
	{KindRanked, `["c","a","d","b"]`},
	{KindApprove, `{"a":"yes","b":"no","c":"abstain","d":"yes"}`},
}

func BenchmarkValidCanonical(b *testing.B) {
	for _, bb := range benchBallots {
		b.Run(string(bb.kind), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !ValidCanonical(bb.s) {
					b.Fatal("not valid")
				}
			}
		})
	}
}

func BenchmarkParseCanonical(b *testing.B) {
	for _, bb := range benchBallots {
		b.Run(string(bb.kind), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseCanonical(bb.kind, bb.s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkCountAdd(b *testing.B) {
	choices := []string{"a", "b", "c", "d"}
	for _, bb := range benchBallots {
		p, err := ParseCanonical(bb.kind, bb.s)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(string(bb.kind), func(b *testing.B) {
			b.ReportAllocs()
			c := NewCount(bb.kind, choices)
			for b.Loop() {
				c.Add(p, 1)
			}
		})
	}
}

// BenchmarkParseBallot reads a client's ballot as intake does: with the
// scanner (ParseBallot) and, for the baseline, encoding/json's reader
// alone (parseBallotJSON), key order not canonical.
func BenchmarkParseBallot(b *testing.B) {
	for _, bb := range []struct {
		kind Kind
		raw  string
	}{
		{KindMultiple, `["c","a"]`},
		{KindScore, `{"d":0,"a":3,"c":5,"b":4}`},
		{KindRanked, `["c","a","d","b"]`},
		{KindApprove, `{"b":"no","a":"yes","d":"yes","c":"abstain"}`},
	} {
		raw := []byte(bb.raw)
		for _, r := range []struct {
			name  string
			parse func(Kind, []byte) (Ballot, error)
		}{{"scanner", ParseBallot}, {"json", parseBallotJSON}} {
			b.Run(string(bb.kind)+"/"+r.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := r.parse(bb.kind, raw); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
