// Command sbom writes the software bill of materials of a Go binary as
// CycloneDX 1.5 JSON: the binary itself (its SHA-256), the Go standard
// library it was built with and every module linked into it, each with its
// version, package URL and go.sum hash, exactly as the binary's build
// information records them (what `go version -m` prints). make image runs
// it on the image's tally binary and writes the result beside the image:
//
//	go run ./internal/sbom -name tally -version V -time UNIX BINARY > tally.cdx.json
//
// The output depends on its inputs only: -time (make image passes the
// commit's SOURCE_DATE_EPOCH) is the document's timestamp, and its serial
// number is derived from the binary's hash, so one binary gives one file.
package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"
)

func main() {
	name := flag.String("name", "", "the `NAME` of the binary's component (default: its main module's path)")
	version := flag.String("version", "", "the binary's `VERSION` (default: its main module's version)")
	created := flag.Int64("time", 0, "the document's timestamp, in Unix `SECONDS` (SOURCE_DATE_EPOCH)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: sbom [-name NAME] [-version VERSION] -time SECONDS BINARY")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 || *created <= 0 {
		flag.Usage()
		os.Exit(2)
	}
	bin, err := os.ReadFile(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "sbom:", err)
		os.Exit(1)
	}
	info, err := buildinfo.ReadFile(flag.Arg(0))
	if err != nil {
		fmt.Fprintf(os.Stderr, "sbom: %s: %v (is it a Go binary?)\n", flag.Arg(0), err)
		os.Exit(1)
	}
	doc, err := bom(bin, info, *name, *version, time.Unix(*created, 0))
	if err == nil {
		err = write(os.Stdout, doc)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sbom:", err)
		os.Exit(1)
	}
}

// The parts of CycloneDX 1.5 (https://cyclonedx.org/docs/1.5/json/) the
// document uses.
type (
	document struct {
		BOMFormat    string       `json:"bomFormat"`
		SpecVersion  string       `json:"specVersion"`
		SerialNumber string       `json:"serialNumber"`
		Version      int          `json:"version"`
		Metadata     metadata     `json:"metadata"`
		Components   []component  `json:"components"`
		Dependencies []dependency `json:"dependencies"`
	}
	metadata struct {
		Timestamp string    `json:"timestamp"`
		Component component `json:"component"`
	}
	component struct {
		BOMRef     string     `json:"bom-ref"`
		Type       string     `json:"type"`
		Name       string     `json:"name"`
		Version    string     `json:"version,omitempty"`
		PURL       string     `json:"purl,omitempty"`
		Hashes     []hash     `json:"hashes,omitempty"`
		Properties []property `json:"properties,omitempty"`
	}
	hash struct {
		Alg     string `json:"alg"`
		Content string `json:"content"`
	}
	property struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	}
	dependency struct {
		Ref       string   `json:"ref"`
		DependsOn []string `json:"dependsOn"`
	}
)

// bom is the document of the binary bin, whose build information is info.
func bom(bin []byte, info *buildinfo.BuildInfo, name, version string, created time.Time) (document, error) {
	if name == "" {
		name = info.Main.Path
	}
	if version == "" {
		version = info.Main.Version
	}
	sum := sha256.Sum256(bin)
	main := component{
		BOMRef: purl(info.Main.Path, version), Type: "application", Name: name, Version: version,
		PURL:   purl(info.Main.Path, version),
		Hashes: []hash{{"SHA-256", hex.EncodeToString(sum[:])}},
	}
	for _, s := range info.Settings {
		main.Properties = append(main.Properties, property{"go:build:" + s.Key, s.Value})
	}
	std := component{
		BOMRef: purl("stdlib", info.GoVersion), Type: "library", Name: "stdlib",
		Version: info.GoVersion, PURL: purl("stdlib", info.GoVersion),
	}
	comps := []component{std}
	for _, m := range info.Deps {
		c, err := module(m)
		if err != nil {
			return document{}, err
		}
		comps = append(comps, c)
	}
	deps := dependency{Ref: main.BOMRef}
	for _, c := range comps {
		deps.DependsOn = append(deps.DependsOn, c.BOMRef)
	}
	return document{
		BOMFormat: "CycloneDX", SpecVersion: "1.5", Version: 1,
		SerialNumber: serial(sum),
		Metadata:     metadata{Timestamp: created.UTC().Format(time.RFC3339), Component: main},
		Components:   comps,
		Dependencies: []dependency{deps},
	}, nil
}

// module is the component of one module the binary links; a replaced
// module is named as the replacement that was built.
func module(m *debug.Module) (component, error) {
	if m.Replace != nil {
		m = m.Replace
	}
	if m.Version == "" {
		return component{}, fmt.Errorf("module %s has no version (replaced by a directory?): it cannot be named in an SBOM", m.Path)
	}
	c := component{BOMRef: purl(m.Path, m.Version), Type: "library", Name: m.Path, Version: m.Version, PURL: purl(m.Path, m.Version)}
	if h, ok := strings.CutPrefix(m.Sum, "h1:"); ok {
		// go.sum's h1: is the SHA-256 of the module's file list and their
		// hashes (golang.org/x/mod/sumdb/dirhash), not of an archive.
		if _, err := base64.StdEncoding.DecodeString(h); err != nil {
			return component{}, fmt.Errorf("module %s: go.sum hash %q: %w", m.Path, m.Sum, err)
		}
		c.Properties = []property{{"go:module:sum", m.Sum}}
	}
	return c, nil
}

// purl is the package URL of a Go module (github.com/package-url/purl-spec,
// type golang). Module paths are letters, digits and -._~/ (golang.org/x/mod
// module.CheckPath), none of which needs escaping.
func purl(path, version string) string {
	if version == "" || version == "(devel)" {
		return "pkg:golang/" + path
	}
	return "pkg:golang/" + path + "@" + version
}

// serial is an RFC 4122 URN made from the binary's hash (a name-based UUID
// of version 8's layout), so that one binary always gets one serial number.
func serial(sum [32]byte) string {
	u := sum[:16]
	u[6] = u[6]&0x0f | 0x80
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("urn:uuid:%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

func write(w io.Writer, doc document) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return errors.Join(errors.New("write the document"), err)
	}
	return nil
}
