package charttest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
)

// readmeChart is the README's paragraph on the chart and its commands:
// from its heading to the end of its code block.
func readmeChart(t *testing.T) (prose, commands string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "**The Helm chart.**")
	if !ok {
		t.Fatal(`README.md has no "**The Helm chart.**" paragraph`)
	}
	prose, rest, ok = strings.Cut(rest, "```sh\n")
	if !ok {
		t.Fatal("README.md: the chart's paragraph has no sh code block")
	}
	commands, _, ok = strings.Cut(rest, "```")
	if !ok {
		t.Fatal("README.md: the chart's code block is not closed")
	}
	return prose, commands
}

// valueAt is the value at a dotted path of the chart's values.yaml.
func valueAt(vals common.Values, path string) (any, bool) {
	v, err := vals.PathValue(path)
	if err == nil {
		return v, true
	}
	// PathValue answers only leaves; a table is there too.
	_, err = vals.Table(path)
	return nil, err == nil
}

// TestReadmeChart holds the README's chart commands to the chart: at most
// three; the chart they install is this one; every value the paragraph
// and the commands name is one values.yaml has; and the Deployment the
// last command waits for is the one the release they install makes, in
// the namespace they install it in.
func TestReadmeChart(t *testing.T) {
	t.Parallel()
	prose, commands := readmeChart(t)
	lines := strings.Split(strings.TrimSpace(commands), "\n")
	if len(lines) > 3 {
		t.Errorf("README.md: the chart takes %d commands, want three or fewer:\n%s", len(lines), commands)
	}
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	vals := common.Values(chrt.Values)

	valueName := regexp.MustCompile("`([a-z][A-Za-z]*(?:\\.[a-z][A-Za-z]*)+)(?:=[^`]*)?`")
	named := 0
	for _, m := range valueName.FindAllStringSubmatch(prose, -1) {
		if strings.HasSuffix(m[1], ".yaml") || strings.HasSuffix(m[1], ".json") || strings.HasSuffix(m[1], ".key") {
			continue
		}
		named++
		if _, ok := valueAt(vals, m[1]); !ok {
			t.Errorf("README.md names the value %s, which values.yaml does not have", m[1])
		}
	}
	if named == 0 {
		t.Error("README.md's chart paragraph names no value; the pattern that finds them is wrong")
	}

	var install []string
	for _, l := range lines {
		if m := regexp.MustCompile(`^helm install (\S+) deploy/helm .*--namespace (\S+)`).FindStringSubmatch(l); m != nil {
			install = m
		}
	}
	if install == nil {
		t.Fatalf("README.md: no `helm install NAME deploy/helm ... --namespace NS` among\n%s", commands)
	}
	for _, f := range regexp.MustCompile(`--set-file (\S+)`).FindAllStringSubmatch(commands, -1) {
		for _, kv := range strings.Split(f[1], ",") {
			k, _, _ := strings.Cut(kv, "=")
			if v, ok := valueAt(vals, k); !ok {
				t.Errorf("README.md: --set-file %s: values.yaml has no %s", kv, k)
			} else if _, isString := v.(string); !isString {
				t.Errorf("README.md: --set-file %s: %s is no string in values.yaml", kv, k)
			}
		}
	}
	wait := regexp.MustCompile(`kubectl --namespace (\S+) rollout status deployment/(\S+)`).FindStringSubmatch(commands)
	if wait == nil {
		t.Fatalf("README.md: no `kubectl --namespace NS rollout status deployment/NAME` among\n%s", commands)
	}
	if wait[1] != install[2] {
		t.Errorf("README.md installs into the namespace %s and waits in %s", install[2], wait[1])
	}
	var names []string
	for _, m := range renderAs(t, install[1], map[string]any{}) {
		if m.kind == "Deployment" {
			names = append(names, m.meta.GetName())
		}
	}
	if !strings.Contains(" "+strings.Join(names, " ")+" ", " "+wait[2]+" ") {
		t.Errorf("README.md waits for deployment/%s; the release %s makes the Deployments %v", wait[2], install[1], names)
	}
}
