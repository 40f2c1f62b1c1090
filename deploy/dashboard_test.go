package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

const dashboardFile = "grafana/tally.json"

// dashboard is what the tests read of a Grafana dashboard.
type dashboard struct {
	ID            *int    `json:"id"`
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *datasourceRef `json:"datasource"`
	GridPos    struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		Expr       string         `json:"expr"`
		RefID      string         `json:"refId"`
		Datasource *datasourceRef `json:"datasource"`
	} `json:"targets"`
	// Panels are those of a collapsed row.
	Panels []panel `json:"panels"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// datasourceVar is the dashboard's variable of its Prometheus data source:
// Grafana asks for it at import, and every query reads it.
const datasourceVar = "datasource"

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// allPanels lists the panels of d, those of collapsed rows included.
func (d dashboard) allPanels() []panel {
	var out []panel
	for _, p := range d.Panels {
		out = append(out, p)
		out = append(out, p.Panels...)
	}
	return out
}

// grafanaVars are the variables Grafana replaces in a query before
// Prometheus sees it, with a value of the same kind.
var grafanaVars = strings.NewReplacer(
	"${__rate_interval}", "1m", "$__rate_interval", "1m",
	"${__interval}", "15s", "$__interval", "15s",
	"${__range}", "1h", "$__range", "1h",
)

// queries are the PromQL expressions of the dashboard, as Prometheus gets
// them.
func (d dashboard) queries() ([]query, error) {
	var out []query
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			where := fmt.Sprintf("%s: panel %d (%s), target %s", dashboardFile, p.ID, p.Title, tg.RefID)
			expr := grafanaVars.Replace(tg.Expr)
			if strings.Contains(expr, "$") {
				return nil, fmt.Errorf("%s: %q uses a variable the tests do not know", where, tg.Expr)
			}
			out = append(out, query{where: where, expr: expr})
		}
	}
	return out, nil
}

func TestDashboardImports(t *testing.T) {
	t.Parallel()
	d := loadDashboard(t)
	if d.ID != nil {
		t.Errorf("id is %d: an exported dashboard has id null, so that importing it creates one", *d.ID)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q: both are needed", d.UID, d.Title)
	}
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d: panels name their data source by uid from 36 on", d.SchemaVersion)
	}
	hasVar := false
	for _, v := range d.Templating.List {
		hasVar = hasVar || (v.Name == datasourceVar && v.Type == "datasource" && v.Query == "prometheus")
	}
	if !hasVar {
		t.Errorf("no variable %q of type datasource with query prometheus", datasourceVar)
	}

	ids := map[int]string{}
	var placed []panel
	for _, p := range d.allPanels() {
		if other, ok := ids[p.ID]; ok {
			t.Errorf("panels %q and %q have the same id %d", other, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v is not within the 24 columns", p.Title, g)
		}
		for _, q := range placed {
			h := q.GridPos
			if g.X < h.X+h.W && h.X < g.X+g.W && g.Y < h.Y+h.H && h.Y < g.Y+g.H {
				t.Errorf("panels %q and %q overlap", q.Title, p.Title)
			}
		}
		placed = append(placed, p)
		if p.Type == "row" {
			continue
		}
		checkPanelQueries(t, p)
	}
}

// checkPanelQueries checks that p has queries and reads the data source
// variable.
func checkPanelQueries(t *testing.T, p panel) {
	t.Helper()
	wantDS := datasourceRef{Type: "prometheus", UID: "${" + datasourceVar + "}"}
	if p.Datasource == nil || *p.Datasource != wantDS {
		t.Errorf("panel %q: datasource %+v, want %+v", p.Title, p.Datasource, wantDS)
	}
	if len(p.Targets) == 0 {
		t.Errorf("panel %q has no query", p.Title)
	}
	var refs []string
	for _, tg := range p.Targets {
		if tg.Expr == "" || tg.RefID == "" || slices.Contains(refs, tg.RefID) {
			t.Errorf("panel %q: target %q has no expression, or no refId of its own", p.Title, tg.RefID)
		}
		refs = append(refs, tg.RefID)
		if tg.Datasource != nil && *tg.Datasource != wantDS {
			t.Errorf("panel %q, target %s: datasource %+v, want %+v", p.Title, tg.RefID, *tg.Datasource, wantDS)
		}
	}
}

// TestDashboardPanels names the panels operators are told to look at
// (docs/dashboards.md): renaming one is a change of the docs too.
func TestDashboardPanels(t *testing.T) {
	t.Parallel()
	d := loadDashboard(t)
	var titles []string
	for _, p := range d.allPanels() {
		titles = append(titles, p.Title)
	}
	for _, want := range []string{
		"Votes", "Votes answered by intake, by status", "Votes refused, by reason", "Accept latency (POST /v1/votes)",
		"Queue", "Backlog and pending", "Oldest pending entry", "Dead letters",
		"Projector", "Entries applied, by outcome", "Batch latency",
		"Breakers", "Projector PostgreSQL breaker", "Intake Redis breaker",
		"Work absorbed", "Idempotent replays", "Second responses and reused keys", "Rate-limited requests",
		"Entries reclaimed after a crash", "Lost stream entries (must stay 0)",
	} {
		if !slices.Contains(titles, want) {
			t.Errorf("no panel %q", want)
		}
	}
	qs, err := d.queries()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if _, err := metricNames(q.expr); err != nil {
			t.Errorf("%s: %v", q.where, err)
		}
	}
}
