package deploy

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// maxExposure is the highest exposure `systemd-analyze security` may give
// a unit of deploy/systemd (0 is fully sandboxed, 10 not at all).
const maxExposure = 2.0

// installedTally is where the units run the binary from.
const installedTally = "/usr/local/bin/tally"

// systemdUnit is one unit of deploy/systemd with the daemon it runs.
type systemdUnit struct {
	file, daemon string
	// keyVar is the variable that points the daemon at its key, which the
	// unit hands over as a credential.
	keyVar, credential string
}

var systemdUnits = []systemdUnit{
	{"tally-intake.service", "intake", "TALLY_CREDENTIAL_KEY", "credential.key"},
	{"tally-projector.service", "projector", "TALLY_PROJECTOR_LOG_KEY", "log.key"},
}

// tool is the path of command, from scripts/tool.sh (which installs its
// Debian package when it is missing and the tests run as root). A test
// that cannot have it skips, saying why and how to install it.
func tool(t *testing.T, command, pkg string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join("..", "scripts", "tool.sh"), command, pkg)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("no %s, so this test cannot run: %v\n%s", command, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// unitSettings reads a unit file's Key=Value lines, in order, by key.
func unitSettings(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	settings := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is not Key=Value", path, line)
		}
		settings[k] = append(settings[k], v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return settings
}

// The units pass `systemd-analyze verify` (run on copies whose ExecStart
// names a tally binary that exists, since verify checks it) and each has
// an exposure of at most maxExposure in `systemd-analyze security`.
func TestSystemdUnitsVerifyAndExposure(t *testing.T) {
	t.Parallel()
	analyze := tool(t, "systemd-analyze", "systemd")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := tallyBinary(t)
	overall := regexp.MustCompile(`Overall exposure level for \S+: ([0-9]+\.[0-9]+)`)
	// The README states the exposure systemd-analyze gave with one systemd
	// version; with that version, the figure must still be the one stated.
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	stated := regexp.MustCompile(`an exposure of ([0-9]+\.[0-9]+) with systemd ([0-9]+)`).FindSubmatch(bytes.Join(bytes.Fields(readme), []byte(" ")))
	if stated == nil {
		t.Fatal(`README.md states no "exposure of X with systemd N"`)
	}
	versionOut, err := exec.CommandContext(ctx, analyze, "--version").Output()
	if err != nil {
		t.Fatalf("systemd-analyze --version: %v", err)
	}
	sameSystemd := bytes.HasPrefix(versionOut, []byte("systemd "+string(stated[2])+" "))
	for _, u := range systemdUnits {
		src := filepath.Join("systemd", u.file)
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte("ExecStart="+installedTally+" ")) {
			t.Fatalf("%s: no ExecStart=%s", src, installedTally)
		}
		unit := filepath.Join(dir, u.file)
		if err := os.WriteFile(unit, bytes.ReplaceAll(b, []byte("ExecStart="+installedTally), []byte("ExecStart="+bin)), 0o644); err != nil {
			t.Fatal(err)
		}
		// verify prints what it finds wrong and may still exit 0 on a
		// warning (an unknown key), so any output fails the test.
		out, err := exec.CommandContext(ctx, analyze, "verify", "--man=no", unit).CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", src, err, out)
		}

		out, err = exec.CommandContext(ctx, analyze, "security", "--offline=true", "--no-pager", unit).CombinedOutput()
		m := overall.FindSubmatch(out)
		if err != nil || m == nil {
			t.Errorf("systemd-analyze security --offline=true %s: %v\n%s", src, err, out)
			continue
		}
		exposure, err := strconv.ParseFloat(string(m[1]), 64)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: exposure %.1f", u.file, exposure)
		if sameSystemd && string(m[1]) != string(stated[1]) {
			t.Errorf("%s: exposure %s with systemd %s, and README.md says %s: correct the README", src, m[1], stated[2], stated[1])
		}
		if exposure > maxExposure {
			t.Errorf("%s: exposure %.1f, want at most %.1f; what is left open:\n%s", src, exposure, maxExposure, out)
		}
	}
}

// Both units read the one environment file; each hands its daemon its key
// as a credential and points the daemon's key variable at the file in the
// credentials directory; each runs its daemon as Type=notify (which the
// daemons answer with READY=1, cli's TestProjectorNotifiesSystemd) and is
// restarted on failure. Every variable the units and tally.env set is one
// the daemon reads, as its --help names it: a misspelled one would be
// ignored without a word.
func TestSystemdUnitsSettings(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	bin := tallyBinary(t)
	envFile := unitSettings(t, filepath.Join("systemd", "tally.env"))
	for _, u := range systemdUnits {
		s := unitSettings(t, filepath.Join("systemd", u.file))
		want := map[string]string{
			"Type":            "notify",
			"EnvironmentFile": "/etc/tally/tally.env",
			"LoadCredential":  u.credential + ":/etc/tally/" + u.credential,
			"ExecStart":       installedTally + " " + u.daemon,
			"Restart":         "on-failure",
			"DynamicUser":     "yes",
			"ProtectSystem":   "strict",
			"NoNewPrivileges": "yes",
		}
		for k, v := range want {
			if got := s[k]; len(got) != 1 || got[0] != v {
				t.Errorf("%s: %s=%q, want %s=%s", u.file, k, got, k, v)
			}
		}
		env := map[string]string{}
		for _, kv := range s["Environment"] {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		if got := env[u.keyVar]; got != "%d/"+u.credential {
			t.Errorf("%s: Environment=%s=%s, want %%d/%s (the credentials directory)", u.file, u.keyVar, got, u.credential)
		}
		for k := range envFile {
			env[k] = ""
		}

		help, err := exec.CommandContext(ctx, bin, u.daemon, "--help").CombinedOutput()
		if err != nil {
			t.Fatalf("tally %s --help: %v\n%s", u.daemon, err, help)
		}
		for k := range env {
			if !regexp.MustCompile(`\$` + regexp.QuoteMeta(k) + `\b`).Match(help) {
				t.Errorf("%s sets %s, which tally %s does not read (not in its --help)", u.file, k, u.daemon)
			}
		}
	}
}
