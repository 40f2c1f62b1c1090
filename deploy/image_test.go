package deploy

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/x509"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"tally/internal/chaos"
	"tally/internal/testenv"
)

// The parts of the OCI image layout (github.com/opencontainers/image-spec)
// the test reads.
type (
	ociDescriptor struct {
		MediaType   string            `json:"mediaType"`
		Digest      string            `json:"digest"`
		Size        int64             `json:"size"`
		Annotations map[string]string `json:"annotations"`
	}
	ociIndex struct {
		Manifests []ociDescriptor `json:"manifests"`
	}
	ociManifest struct {
		Config      ociDescriptor     `json:"config"`
		Layers      []ociDescriptor   `json:"layers"`
		Annotations map[string]string `json:"annotations"`
	}
	ociConfig struct {
		Created      string `json:"created"`
		Architecture string `json:"architecture"`
		OS           string `json:"os"`
		Config       struct {
			User       string            `json:"User"`
			Env        []string          `json:"Env"`
			Entrypoint []string          `json:"Entrypoint"`
			Labels     map[string]string `json:"Labels"`
		} `json:"config"`
	}
)

// builtImage is one run of scripts/image.sh (make image) into dir.
type builtImage struct {
	dir, tag string
	digest   string // the manifest's, from index.json
	manifest ociManifest
	config   ociConfig
}

func buildImage(ctx context.Context, t *testing.T, dir string) builtImage {
	t.Helper()
	cmd := exec.CommandContext(ctx, filepath.Join("..", "scripts", "image.sh"), dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/image.sh: %v\n%s", err, out)
	}
	img := builtImage{dir: dir}
	var index ociIndex
	readJSON(t, filepath.Join(dir, "oci", "index.json"), &index)
	if len(index.Manifests) != 1 {
		t.Fatalf("index.json lists %d manifests, want 1: %+v", len(index.Manifests), index)
	}
	img.digest = index.Manifests[0].Digest
	img.tag = index.Manifests[0].Annotations["org.opencontainers.image.ref.name"]
	if recorded, err := os.ReadFile(filepath.Join(dir, "digest")); err != nil || strings.TrimSpace(string(recorded)) != img.digest {
		t.Errorf("the digest file reads %q (%v), the layout's index %s", recorded, err, img.digest)
	}
	readJSON(t, img.blob(img.digest), &img.manifest)
	readJSON(t, img.blob(img.manifest.Config.Digest), &img.config)
	return img
}

func (img builtImage) blob(digest string) string {
	return filepath.Join(img.dir, "oci", "blobs", strings.Replace(digest, ":", string(filepath.Separator), 1))
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func git(ctx context.Context, t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.CommandContext(ctx, "git", args...).Output()
	if err != nil {
		t.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}

// make image, twice from one commit, gives one digest and one SBOM; the
// image runs as tally (65532), its entrypoint is the binary, its labels
// name the commit, and its one layer is owned by root with every file's
// time the commit's. Unpacked by umoci, its binary is static, knows its
// version, finds its CA certificates and, from inside the image's root,
// runs `migrate up`, intake and projector against this test's database
// and Redis prefix: one vote is counted. The SBOM names every module
// `go version -m` finds in that binary.
func TestImage(t *testing.T) {
	t.Parallel()
	umoci := tool(t, "umoci", "umoci")
	ctx, cancel := context.WithTimeout(t.Context(), 7*time.Minute)
	defer cancel()

	first := buildImage(ctx, t, t.TempDir())
	second := buildImage(ctx, t, t.TempDir())
	if first.digest != second.digest {
		t.Errorf("two builds of one commit: digests %s and %s, want one", first.digest, second.digest)
	}
	sbom, err := os.ReadFile(filepath.Join(first.dir, "tally.cdx.json"))
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(filepath.Join(second.dir, "tally.cdx.json")); !bytes.Equal(sbom, again) {
		t.Error("two builds of one commit wrote different SBOMs")
	}
	t.Logf("image %s (tag %s): a layer of %d bytes (gzip)", first.digest, first.tag, first.manifest.Layers[0].Size)

	commitTime, err := strconv.ParseInt(git(ctx, t, "log", "-1", "--format=%ct", "HEAD"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	revision := git(ctx, t, "rev-parse", "HEAD")
	created := time.Unix(commitTime, 0).UTC().Format(time.RFC3339)
	cfg := first.config
	if cfg.Config.User != "65532:65532" || len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != "/usr/local/bin/tally" ||
		cfg.OS != "linux" || cfg.Created != created {
		t.Errorf("config: user %q, entrypoint %q, os %q, created %q; want 65532:65532, the binary, linux, %s",
			cfg.Config.User, cfg.Config.Entrypoint, cfg.OS, cfg.Created, created)
	}
	if len(cfg.Config.Env) != 1 || cfg.Config.Env[0] != "TALLY_INTAKE_LISTEN=:8080" {
		t.Errorf("config: environment %q, want TALLY_INTAKE_LISTEN=:8080 alone (a container's loopback is its own)", cfg.Config.Env)
	}
	labels := cfg.Config.Labels
	for _, k := range []string{"source", "revision", "version", "licenses"} {
		k = "org.opencontainers.image." + k
		if labels[k] == "" || first.manifest.Annotations[k] != labels[k] {
			t.Errorf("label %s %q, annotation %q: want both, equal", k, labels[k], first.manifest.Annotations[k])
		}
	}
	if labels["org.opencontainers.image.revision"] != revision || labels["org.opencontainers.image.version"] != first.tag {
		t.Errorf("labels %v: want revision %s and the tag %s as version", labels, revision, first.tag)
	}
	if len(first.manifest.Layers) != 1 {
		t.Fatalf("%d layers, want 1", len(first.manifest.Layers))
	}
	checkLayer(t, first.blob(first.manifest.Layers[0].Digest), commitTime)

	bundle := filepath.Join(t.TempDir(), "bundle")
	if out, err := exec.CommandContext(ctx, umoci, "unpack", "--rootless", "--image",
		filepath.Join(first.dir, "oci")+":"+first.tag, bundle).CombinedOutput(); err != nil {
		t.Fatalf("umoci unpack --rootless: %v\n%s", err, out)
	}
	rootfs := filepath.Join(bundle, "rootfs")
	bin := filepath.Join(rootfs, "usr", "local", "bin", "tally")
	checkStatic(t, bin)
	checkCACertificates(t, filepath.Join(rootfs, "etc", "ssl", "certs", "ca-certificates.crt"))
	if passwd, err := os.ReadFile(filepath.Join(rootfs, "etc", "passwd")); err != nil || !strings.Contains(string(passwd), "\ntally:x:65532:65532:") {
		t.Errorf("/etc/passwd names no user tally of uid 65532: %q %v", passwd, err)
	}
	if sqls, _ := filepath.Glob(filepath.Join(rootfs, "usr", "share", "tally", "migrations", "*.sql")); len(sqls) == 0 {
		t.Error("no migrations under /usr/share/tally/migrations")
	}
	if out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput(); err != nil ||
		string(out) != "tally version "+first.tag+" (revision "+revision+")\n" {
		t.Errorf("tally --version: %q %v; want the tag %s and the revision %s", out, err, first.tag, revision)
	}
	checkSBOM(ctx, t, sbom, bin, first.tag)
	voteThroughImage(ctx, t, bin)
}

// checkLayer reads a gzip tar layer: every entry is owned by 0:0, has the
// commit's time as its modification time and no access or change time, and
// the binary and the files it reads are open to any user.
func checkLayer(t *testing.T, path string, commitTime int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		// The image runs as 65532, which owns nothing in it: what it runs
		// and reads must be open to others.
		if want := map[string]int64{"usr/local/bin/tally": 0o555, "etc/ssl/certs/ca-certificates.crt": 0o444,
			"etc/passwd": 0o444}[h.Name]; want != 0 && h.Mode&want != want {
			t.Errorf("layer entry %s: mode %o, want at least %o for a user that owns nothing", h.Name, h.Mode, want)
		}
		if h.Uid != 0 || h.Gid != 0 || h.ModTime.Unix() != commitTime || !h.AccessTime.IsZero() || !h.ChangeTime.IsZero() {
			t.Errorf("layer entry %s: owner %d:%d, mtime %v, atime %v, ctime %v; want 0:0 and the commit's time only",
				h.Name, h.Uid, h.Gid, h.ModTime.Unix(), h.AccessTime, h.ChangeTime)
		}
	}
	sorted := append([]string(nil), names...)
	sort.Strings(sorted)
	for _, want := range []string{"usr/local/bin/tally", "etc/ssl/certs/ca-certificates.crt", "etc/passwd", "etc/group"} {
		if i := sort.SearchStrings(sorted, want); i == len(sorted) || sorted[i] != want {
			t.Errorf("the layer has no %s: %v", want, names)
		}
	}
}

// checkStatic fails unless bin is an ELF executable with no interpreter:
// it needs no libc in the image.
func checkStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("the image's tally: %v", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the image's tally asks for a dynamic loader (PT_INTERP): it is not static")
		}
	}
}

func checkCACertificates(t *testing.T, path string) {
	t.Helper()
	pem, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(pem) {
		t.Errorf("%s holds no certificate", path)
	}
}

// checkSBOM compares the CycloneDX document with what `go version -m`
// reads from the binary: the same modules at the same versions.
func checkSBOM(ctx context.Context, t *testing.T, sbom []byte, bin, version string) {
	t.Helper()
	var doc struct {
		BOMFormat, SpecVersion string
		Metadata               struct {
			Component struct{ Name, Version string }
		}
		Components []struct{ Name, Version, PURL string }
	}
	if err := json.Unmarshal(sbom, &doc); err != nil {
		t.Fatalf("the SBOM: %v", err)
	}
	if doc.BOMFormat != "CycloneDX" || doc.Metadata.Component.Name != "tally" || doc.Metadata.Component.Version != version {
		t.Errorf("the SBOM is %s %s of %+v; want CycloneDX of tally %s", doc.BOMFormat, doc.SpecVersion, doc.Metadata.Component, version)
	}
	inSBOM := map[string]bool{}
	for _, c := range doc.Components {
		inSBOM[c.Name+"@"+c.Version] = true
	}
	out, err := exec.CommandContext(ctx, "go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	deps := 0
	for sc.Scan() {
		// "\tdep\tPATH\tVERSION\tSUM", followed by "\t=>\tPATH\tVERSION\tSUM"
		// when replaced; the replacement is what was built.
		f := strings.Split(strings.TrimPrefix(sc.Text(), "\t"), "\t")
		switch {
		case f[0] == "dep" && len(f) >= 3:
			deps++
			if !inSBOM[f[1]+"@"+f[2]] {
				t.Errorf("go version -m names %s %s, the SBOM does not", f[1], f[2])
			}
		case f[0] == "=>" && len(f) >= 3:
			if !inSBOM[f[1]+"@"+f[2]] {
				t.Errorf("go version -m names the replacement %s %s, the SBOM does not", f[1], f[2])
			}
		}
	}
	if deps == 0 || len(doc.Components) != deps+1 { // +1: the standard library
		t.Errorf("the SBOM has %d components, go version -m %d modules (and the standard library)", len(doc.Components), deps)
	}
}

// voteThroughImage runs the image's binary as an operator would run the
// image: migrate an empty database, make a poll and a voter, run intake
// and projector (as a login granted tally_daemon), vote once and read
// the vote counted.
func voteThroughImage(ctx context.Context, t *testing.T, bin string) {
	t.Helper()
	dir := t.TempDir()
	db := testenv.EmptyPostgres(t)
	_, prefix := testenv.Redis(t)
	common := []string{"--database-url", db.URL, "--redis-url", testenv.RedisURL(), "--stream-prefix", prefix, "--log-format", "text"}
	tally := tallyRunner(t, ctx, bin, common)
	tally("migrate", "up")
	tally("poll", "create", "lunch", "--title", "Lunch on Friday?", "--choice", "pizza", "--choice", "sushi")
	keyFile := filepath.Join(dir, "credential.key")
	if out, err := exec.CommandContext(ctx, bin, "credential", "key", "generate", "--out", keyFile).CombinedOutput(); err != nil {
		t.Fatalf("the image's tally credential key generate: %v\n%s", err, out)
	}
	token := tally("principal", "add", "alice", "--credential-key", keyFile)

	intakeAddr, projectorAddr := freeAddr(t), freeAddr(t)
	daemon := []string{"--database-url", testenv.DaemonLogin(t, db), "--redis-url", testenv.RedisURL(),
		"--stream-prefix", prefix, "--log-format", "text"}
	for _, p := range []*chaos.Process{
		{Name: "projector", Path: bin, LogPath: filepath.Join(dir, "projector.log"),
			Args: append([]string{"projector", "--consumer", "image-test", "--metrics-listen", projectorAddr,
				"--batch-wait", "10ms"}, daemon...),
			Health: "http://" + projectorAddr + "/healthz"},
		{Name: "intake", Path: bin, LogPath: filepath.Join(dir, "intake.log"),
			Args:   append([]string{"intake", "--listen", intakeAddr, "--credential-key", keyFile}, daemon...),
			Health: "http://" + intakeAddr + "/healthz"},
	} {
		t.Cleanup(func() {
			p.Stop(5 * time.Second)
			if t.Failed() {
				t.Logf("--- last lines of the %s's log:\n%s", p.Name, p.LogTail(30))
			}
		})
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c := client{http: &http.Client{Timeout: 5 * time.Second}, base: "http://" + intakeAddr, token: token}
	c.vote(ctx, t, "e-1", "pizza", http.StatusAccepted)
	c.waitApplied(ctx, t, "e-1", "recorded")
	var results struct {
		Total   int `json:"total"`
		Results []struct {
			CandidateID string `json:"candidate_id"`
			Votes       int    `json:"votes"`
		} `json:"results"`
	}
	if err := json.Unmarshal(c.get(ctx, t, c.base+"/v1/polls/lunch/results", http.StatusOK), &results); err != nil {
		t.Fatal(err)
	}
	counted := map[string]int{}
	for _, r := range results.Results {
		counted[r.CandidateID] = r.Votes
	}
	if results.Total != 1 || counted["pizza"] != 1 {
		t.Errorf("results %+v, want the one vote for pizza", results)
	}
}
