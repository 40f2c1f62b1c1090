package deploy

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// query is one PromQL expression of the dashboard or of the rules, with
// where it comes from, for messages.
type query struct {
	where string // "panel 3 (Backlog), target A" or "alert TallyDeadLetters"
	expr  string
}

// metricNames returns the metric names expr selects, each once, in order.
// A selector that does not name its metric exactly (a regular expression
// on __name__, or no name at all) is an error: it cannot be checked.
func metricNames(expr string) ([]string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, fmt.Errorf("parse %q: %w", expr, err)
	}
	var names []string
	var errs []error
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			switch {
			case m.Name != model.MetricNameLabel:
			case m.Type == labels.MatchEqual:
				name = m.Value
			default:
				errs = append(errs, fmt.Errorf("selector %s matches metric names with %s: name them exactly", vs, m.Type))
			}
		}
		if name == "" {
			errs = append(errs, fmt.Errorf("selector %s names no metric", vs))
			return nil
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
		return nil
	})
	return names, errors.Join(errs...)
}

// exported is what the daemons' /metrics answered: the type of each metric
// family, by name.
type exported map[string]dto.MetricType

// scrapeSeries are the series Prometheus itself adds to every scrape's
// target; a query may name them though no daemon exports them.
var scrapeSeries = []string{"up"}

// parseExposition adds the families of a text exposition to e.
func (e exported) parseExposition(r io.Reader) error {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		return err
	}
	for name, mf := range families {
		e[name] = mf.GetType()
	}
	return nil
}

// has reports whether name is a series of an exported family: the family
// itself, the _bucket, _sum or _count of a histogram, the _sum or _count
// of a summary, or a series of the scrape itself.
func (e exported) has(name string) bool {
	if _, ok := e[name]; ok || slices.Contains(scrapeSeries, name) {
		return true
	}
	for suffix, types := range map[string][]dto.MetricType{
		"_bucket": {dto.MetricType_HISTOGRAM},
		"_sum":    {dto.MetricType_HISTOGRAM, dto.MetricType_SUMMARY},
		"_count":  {dto.MetricType_HISTOGRAM, dto.MetricType_SUMMARY},
	} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if t, ok := e[base]; ok && slices.Contains(types, t) {
				return true
			}
		}
	}
	return false
}

// check returns an error naming each metric of q that is not exported,
// or why q cannot be checked.
func (e exported) check(q query) error {
	names, err := metricNames(q.expr)
	if err != nil {
		return fmt.Errorf("%s: %w", q.where, err)
	}
	if len(names) == 0 {
		return fmt.Errorf("%s: %q names no metric", q.where, q.expr)
	}
	var unknown []string
	for _, n := range names {
		if !e.has(n) {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) > 0 {
		return fmt.Errorf("%s: no daemon exports %s (in %q)", q.where, strings.Join(unknown, ", "), q.expr)
	}
	return nil
}

// fixedExported is a small exposition for the checker's own tests.
const fixedExported = `# HELP tally_projector_backlog Entries in the streams.
# TYPE tally_projector_backlog gauge
tally_projector_backlog 0
# HELP tally_projector_lost_total Pending entries Redis deleted.
# TYPE tally_projector_lost_total counter
tally_projector_lost_total 0
# HELP tally_projector_apply_seconds Latency of one Append call.
# TYPE tally_projector_apply_seconds histogram
tally_projector_apply_seconds_bucket{le="0.001"} 0
tally_projector_apply_seconds_bucket{le="+Inf"} 0
tally_projector_apply_seconds_sum 0
tally_projector_apply_seconds_count 0
`

func TestCheckAcceptsWhatIsExportedAndNothingElse(t *testing.T) {
	t.Parallel()
	e := exported{}
	if err := e.parseExposition(strings.NewReader(fixedExported)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		expr string
		ok   bool
	}{
		{`tally_projector_backlog`, true},
		{`max by (job) (tally_projector_backlog) > 1000`, true},
		{`sum(increase(tally_projector_lost_total[1h])) or vector(0)`, true},
		{`histogram_quantile(0.99, sum by (le) (rate(tally_projector_apply_seconds_bucket[5m])))`, true},
		{`rate(tally_projector_apply_seconds_sum[5m]) / rate(tally_projector_apply_seconds_count[5m])`, true},
		{`{__name__="tally_projector_backlog", job="tally-projector"}`, true},
		{`up{job="tally-projector"} == 0 or absent(up{job="tally-projector"})`, true},
		// Made-up names, also hidden among real ones.
		{`tally_projector_backlogg`, false},
		{`tally_projector_backlog + tally_projector_queue_length`, false},
		{`max(tally_projector_backlog) and deriv(tally_intake_votes_total[5m]) > 0`, false},
		{`{__name__="tally_projector_made_up"}`, false},
		// The suffixes of a histogram belong to histograms only.
		{`tally_projector_backlog_bucket`, false},
		{`tally_projector_lost_total_count`, false},
		{`tally_projector_apply_seconds_total`, false},
		// What cannot be checked is refused too.
		{`{__name__=~"tally_.+"}`, false},
		{`{job="tally-projector"}`, false},
		{`vector(1)`, false},
		{`sum(rate(tally_projector_lost_total[$__rate_interval]))`, false},
		{`max(tally_projector_backlog`, false},
	} {
		err := e.check(query{where: "test", expr: tc.expr})
		if (err == nil) != tc.ok {
			t.Errorf("check(%q) = %v, want ok=%v", tc.expr, err, tc.ok)
		}
	}
}

func TestMetricNames(t *testing.T) {
	t.Parallel()
	got, err := metricNames(`sum by (le) (rate(a_bucket{x="1"}[5m])) / on() group_left max_over_time(b[1h:1m]) or a_bucket offset 5m`)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a_bucket", "b"}; !slices.Equal(got, want) {
		t.Errorf("metricNames = %q, want %q", got, want)
	}
}
