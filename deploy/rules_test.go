package deploy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v4"
)

const (
	rulesFile     = "prometheus/alerts.yml"
	rulesTestFile = "prometheus/alerts_test.yml"
	scrapeFile    = "prometheus/prometheus.yml"
)

// ruleFile is what the tests read of a Prometheus rule file.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func loadRules(t *testing.T) []rule {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.Load(b, &f, yaml.WithKnownFields()); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		t.Fatalf("%s has no rules", rulesFile)
	}
	return out
}

// ruleQueries are the expressions of the rules.
func ruleQueries(rules []rule) []query {
	var out []query
	for _, r := range rules {
		out = append(out, query{where: fmt.Sprintf("%s: alert %s", rulesFile, r.Alert+r.Record), expr: r.Expr})
	}
	return out
}

// TestAlertRules checks what promtool does not: every alert says how bad
// it is, what happened and where its runbook is.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	for _, r := range loadRules(t) {
		if r.Alert == "" {
			t.Errorf("rule %q is not an alert", r.Record)
			continue
		}
		if s := r.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("alert %s: severity %q, want warning or critical", r.Alert, s)
		}
		for _, a := range []string{"summary", "description", "runbook"} {
			if r.Annotations[a] == "" {
				t.Errorf("alert %s has no %s annotation", r.Alert, a)
			}
		}
		if want := "docs/dashboards.md#" + strings.ToLower(r.Alert); r.Annotations["runbook"] != want {
			t.Errorf("alert %s: runbook %q, want %q", r.Alert, r.Annotations["runbook"], want)
		}
		if _, err := metricNames(r.Expr); err != nil {
			t.Errorf("alert %s: %v", r.Alert, err)
		}
	}
}

// TestPromtoolRules has promtool check the rules and the scrape
// configuration and run the rules' unit tests.
func TestPromtoolRules(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", rulesFile},
		{"test", "rules", rulesTestFile},
		{"check", "config", scrapeFile},
	} {
		t.Run(strings.Join(args[:2], " "), func(t *testing.T) {
			if out, err := runPromtool(t, bin, nil, args...); err != nil {
				t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		})
	}
}

var promtoolOnce = sync.OnceValues(func() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join("..", "scripts", "promtool.sh"))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("scripts/promtool.sh: %w\n%s", err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
})

// promtool is the path of a promtool from scripts/promtool.sh. A test
// that cannot get one fails: the files it checks would go unchecked.
func promtool(t *testing.T) string {
	t.Helper()
	bin, err := promtoolOnce()
	if err != nil {
		t.Fatalf("no promtool, so the rules and metrics cannot be checked "+
			"(install Prometheus' promtool and put it on PATH, or set PROMTOOL to one): %v", err)
	}
	return bin
}

// runPromtool runs promtool with args, and stdin when not nil, and
// returns its output.
func runPromtool(t *testing.T, bin string, stdin io.Reader, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdin = stdin
	out, err := cmd.CombinedOutput()
	return string(out), err
}
