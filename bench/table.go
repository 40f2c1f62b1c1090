package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// fig is one measured figure.
type fig struct {
	id      string
	what    string
	value   float64
	unit    string
	extra   string // more of the same measurement (latencies, runs)
	load    string // one-minute load average when it started
	command string
}

// ratio compares a figure with its baseline or limit.
type ratio struct {
	of, to    string // figure ids; to "" compares with limit
	limit     float64
	target    string
	atLeast   float64 // the ratio must be at least this (0: no target)
	atMost    float64 // the ratio must be at most this (0: no bound)
	asPercent bool
	ceiling   bool // to is C2 (C2T): compare with the better of it and C1 (C1T)
}

var ratios = []ratio{
	{of: "P", to: "A", target: "≥ 20×", atLeast: 20},
	{of: "P", to: "P1", target: "(the second worker's gain)"},
	{of: "P-multiple", to: "P", target: "≥ 0.8×", atLeast: 0.8},
	{of: "P-score", to: "P", target: "≥ 0.8×", atLeast: 0.8},
	{of: "P-ranked", to: "P", target: "≥ 0.8×", atLeast: 0.8},
	{of: "P-latest", to: "P", target: "≥ 0.8× (30% of the ballots changes)", atLeast: 0.8},
	{of: "P", to: "B1", target: "(batching's gain)"},
	{of: "P", to: "C1", target: "(one writer)", asPercent: true},
	{of: "P", to: "U", target: "≥ 80% (the rules, the projection and the log cost at most a fifth of the row)", atLeast: 0.8, asPercent: true},
	{of: "P", to: "C2", target: "≥ 60% of the ceiling (the better of C1, C2)", atLeast: 0.6, asPercent: true, ceiling: true},
	{of: "PPG", to: "UPG", target: "≤ 1.25× (P / U ≥ 80% were PostgreSQL alone on the cores: the rules, the projection and the log cost it at most a quarter more than the row)", atMost: 1.25},
	{of: "PT", to: "P", target: "(the tuned configuration against the default one)"},
	{of: "PT", to: "UT", target: "≥ 80% (as P / U, on the tuned server)", atLeast: 0.8, asPercent: true},
	{of: "PT", to: "C2T", target: "≥ 60% of the ceiling (the better of C1T, C2T)", atLeast: 0.6, asPercent: true, ceiling: true},
	{of: "IM", to: "A", target: "≥ 20×", atLeast: 20},
	{of: "IM", to: "C2", target: "≥ 60% of the ceiling (the better of C1, C2)", atLeast: 0.6, asPercent: true, ceiling: true},
	{of: "I", to: "IB", target: "≥ 50%", atLeast: 0.5, asPercent: true},
	{of: "B", to: "BB", target: "≥ 50% (the burst accepted at half the bare handler's rate at least)", atLeast: 0.5, asPercent: true},
	{of: "B-go", to: "BB-go", target: "(B / BB with the bench's Go client sending instead of wrk)", asPercent: true},
	{of: "B-go", to: "B", target: "(the burst from the Go client against from wrk)", asPercent: true},
	{of: "BC", to: "BS", target: "≥ 8× (the burst counted, against the synchronous design)", atLeast: 8},
	{of: "BX", limit: 0.01, target: "≤ 1 commit per 100 votes beyond the projector's batches (intake asks PostgreSQL nothing per vote)", atMost: 1, asPercent: true},
	{of: "BU", limit: 100, target: "≤ 100 µs of server-side CPU per vote (issue 37)", atMost: 1, asPercent: true},
	{of: "BUI", limit: 45, target: "≤ 45 µs of intake's CPU per vote (issue 37)", atMost: 1, asPercent: true},
	{of: "B-LC", to: "B", target: "(the burst with --ledger-check against without it)", asPercent: true},
	{of: "B-LCC", to: "BC", target: "(the same, counted)", asPercent: true},
	{of: "B-multiple", to: "B", target: "≥ 0.8×", atLeast: 0.8},
	{of: "B-score", to: "B", target: "≥ 0.8×", atLeast: 0.8},
	{of: "B-ranked", to: "B", target: "≥ 0.8×", atLeast: 0.8},
	{of: "B-latest", to: "B", target: "≥ 0.8× (30% of the ballots changes)", atLeast: 0.8},
	{of: "B-multipleC", to: "BC", target: "≥ 0.8× (counted)", atLeast: 0.8},
	{of: "B-scoreC", to: "BC", target: "≥ 0.8× (counted)", atLeast: 0.8},
	{of: "B-rankedC", to: "BC", target: "≥ 0.8× (counted)", atLeast: 0.8},
	{of: "B-latestC", to: "BC", target: "≥ 0.8× (counted)", atLeast: 0.8},
	{of: "B-OIDC", to: "BB", target: "≥ 40% (the burst with OpenID Connect tokens)", atLeast: 0.4, asPercent: true},
	{of: "E", to: "I", target: "(intake under wrk, another client)", asPercent: true},
	{of: "EC", to: "E", target: "(a Redis Cluster of three masters against one Redis)", asPercent: true},
	{of: "S22", to: "S11", target: "(two intakes and two workers against one of each)"},
	{of: "H2A", to: "H2", target: "(two writers into a poll each against one hot poll)"},
	{of: "SSE", to: "SSE0", target: "(intake's CPU with the live viewers against none)"},
	{of: "MSSE", to: "MSSE0", target: "(intake's peak RSS with the live viewers against none)"},
	{of: "R", to: "RG", target: "≤ 5×", atMost: 5},
	{of: "RK", to: "RKG", target: "≤ 5× (ranked ballots)", atMost: 5},
	{of: "RL", to: "RLG", target: "≤ 5× (answers latest)", atMost: 5},
	{of: "PR", limit: 5, target: "< 5 ms", atMost: 1, asPercent: true},
	{of: "AV", limit: 10, target: "< 10 s", atMost: 1, asPercent: true},
	{of: "MB", limit: 150, target: "< 150 MB", atMost: 1, asPercent: true},
	{of: "MP", limit: 150, target: "< 150 MB", atMost: 1, asPercent: true},
	{of: "CE-L", to: "CE-S", target: "≤ 2× (a change enforced at the other intake, largest catalog against smallest)", atMost: 2},
	{of: "CP-L", to: "CP-S", target: "≤ 2× (POST /v1/polls, largest catalog against smallest)", atMost: 2},
	{of: "CV-S", to: "CV0-S", target: "≤ 1.2× (vote p99 while polls are created, smallest catalog)", atMost: 1.2},
	{of: "CV-M", to: "CV0-M", target: "≤ 1.2× (the same, middle catalog)", atMost: 1.2},
	{of: "CV-L", to: "CV0-L", target: "≤ 1.2× (the same, largest catalog)", atMost: 1.2},
	{of: "CM-L", limit: 250, target: "≤ 250 MB (intake with the largest catalog)", atMost: 1, asPercent: true},
	{of: "CMX-L", to: "CMH-L", target: "≤ 1.2× (steady through the changes: after all of them against after half)", atMost: 1.2},
	{of: "CMX-L", to: "CM-L", target: "(after the changes against once loaded)"},
	{of: "C503", to: "CN", target: "0% (no admin write answered 503 while PostgreSQL answered)", atMost: 1e-9, asPercent: true},
	{of: "CB-L", limit: 2000, target: "≥ 2,000 polls/s (bulk over HTTP, largest catalog)", atLeast: 1},
	{of: "G-end", to: "G-start", target: "(the projector's drain into a full ledger against into an empty one)"},
	{of: "CBC-L", limit: 2000, target: "≥ 2,000 polls/s (bulk through the CLI, largest catalog)", atLeast: 1},
}

type table struct {
	figs     []fig
	failed   []string
	took     time.Duration
	short    bool
	versions string
	// loadStart and loadEnd are the load averages (1, 5, 15 minutes) when
	// the run started and ended, as uptime prints them.
	loadStart, loadEnd string
}

func (t *table) add(f fig) { t.figs = append(t.figs, f) }

func (t *table) fail(name string, err error) {
	t.failed = append(t.failed, fmt.Sprintf("%s: FAILED: %v", name, err))
}

func (t *table) skip(name, why string) {
	t.failed = append(t.failed, fmt.Sprintf("%s: skipped: %s", name, why))
}

func (t *table) get(id string) (fig, bool) {
	for _, f := range t.figs {
		if f.id == id {
			return f, true
		}
	}
	return fig{}, false
}

func (f fig) String() string {
	var v string
	switch {
	case f.unit == "s":
		v = fmt.Sprintf("%.2f s", f.value)
	case f.unit == "MB":
		v = fmt.Sprintf("%.0f MB", f.value)
	case f.unit == "ms":
		v = fmt.Sprintf("%.2f ms", f.value)
	case f.unit == "µs":
		v = fmt.Sprintf("%.1f µs", f.value)
	case f.unit == "commits per vote":
		v = fmt.Sprintf("%.4f %s", f.value, f.unit)
	default:
		v = fmt.Sprintf("%s %s", thousands(f.value), f.unit)
	}
	if f.extra != "" {
		v += "; " + f.extra
	}
	return v
}

func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func (t *table) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Run of %s UTC", time.Now().UTC().Format("2006-01-02 15:04"))
	if t.short {
		b.WriteString(" (short sizes: a check, not figures)")
	}
	fmt.Fprintf(&b, ", %s; %s; %s; took %s; load average %s at the start, %s at the end.\n\n",
		machine(), t.versions, goVersion(), t.took.Round(time.Second), t.loadStart, t.loadEnd)
	b.WriteString("| id | measurement | result | load | command |\n|---|---|---|---|---|\n")
	for _, f := range t.figs {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | `%s` |\n", f.id, f.what, f, f.load, strings.ReplaceAll(f.command, "|", `\|`))
	}
	b.WriteString("\n| ratio | value | target | met |\n|---|---|---|---|\n")
	for _, r := range ratios {
		of, ok := t.get(r.of)
		if !ok {
			continue
		}
		den, name := r.limit, fmt.Sprintf("%s / %g %s", r.of, r.limit, of.unit)
		if r.to != "" {
			to, ok := t.get(r.to)
			if !ok {
				continue
			}
			den, name = to.value, r.of+" / "+r.to
			if r.ceiling {
				c1id := strings.Replace(r.to, "C2", "C1", 1)
				if c1, ok := t.get(c1id); ok && c1.value > den {
					den, name = c1.value, r.of+" / "+c1id
				}
			}
		}
		if den == 0 {
			continue
		}
		v := of.value / den
		val := fmt.Sprintf("%.1f×", v)
		if v < 10 { // 0.77× is not 0.8×, which a target of 0.8 would read as met
			val = fmt.Sprintf("%.2f×", v)
		}
		if r.asPercent {
			val = fmt.Sprintf("%.0f%%", 100*v)
		}
		met := ""
		switch {
		case r.atLeast > 0 && v >= r.atLeast, r.atMost > 0 && v <= r.atMost:
			met = "yes"
		case r.atLeast > 0 || r.atMost > 0:
			met = "**no**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", name, val, r.target, met)
	}
	for _, f := range t.failed {
		fmt.Fprintf(&b, "\n%s\n", f)
	}
	return b.String()
}

const beginMarker, endMarker = "<!-- bench:begin -->", "<!-- bench:end -->"

// writeBetweenMarkers replaces what lies between the bench markers of
// path with md, or appends the markers and md when path has none.
func writeBetweenMarkers(path, md string) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	s := string(old)
	block := beginMarker + "\n" + md + "\n" + endMarker
	i, j := strings.Index(s, beginMarker), strings.Index(s, endMarker)
	if i >= 0 && j > i {
		s = s[:i] + block + s[j+len(endMarker):]
	} else {
		if s != "" && !strings.HasSuffix(s, "\n") {
			s += "\n"
		}
		s += "\n" + block + "\n"
	}
	return os.WriteFile(path, []byte(s), 0o644)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

func secs(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, fmt.Sprintf("%.2f", d.Seconds()))
	}
	return strings.Join(s, ", ") + " s"
}

func count(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return itoa(n)
}

func itoa(n int) string { return strconv.Itoa(n) }
