package main

import (
	"debug/buildinfo"
	"os"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// The document of a binary (this test's) names the binary by its hash,
// the standard library, and each module of its build information once,
// a replaced module as its replacement; one binary gives one document.
func TestBOM(t *testing.T) {
	bin, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	info, err := buildinfo.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	info.Deps = append(info.Deps, &debug.Module{Path: "example.com/old", Version: "v1.0.0",
		Replace: &debug.Module{Path: "example.com/new", Version: "v1.2.0", Sum: "h1:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="}})
	at := time.Unix(1700000000, 0)
	doc, err := bom(bin, info, "tally", "v9", at)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := bom(bin, info, "tally", "v9", at)
	if doc.SerialNumber != again.SerialNumber || !strings.HasPrefix(doc.SerialNumber, "urn:uuid:") {
		t.Errorf("serial numbers %q and %q, want one urn:uuid for one binary", doc.SerialNumber, again.SerialNumber)
	}
	if doc.Metadata.Timestamp != "2023-11-14T22:13:20Z" || doc.Metadata.Component.Name != "tally" ||
		len(doc.Metadata.Component.Hashes) != 1 || len(doc.Metadata.Component.Hashes[0].Content) != 64 {
		t.Errorf("metadata %+v, want the time given, the name and the binary's SHA-256", doc.Metadata)
	}
	if len(doc.Components) != len(info.Deps)+1 || doc.Components[0].Name != "stdlib" || doc.Components[0].Version != info.GoVersion {
		t.Fatalf("%d components starting with %+v, want stdlib %s and the %d modules", len(doc.Components), doc.Components[0], info.GoVersion, len(info.Deps))
	}
	last := doc.Components[len(doc.Components)-1]
	if last.PURL != "pkg:golang/example.com/new@v1.2.0" || len(last.Properties) != 1 || last.Properties[0].Value != "h1:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=" {
		t.Errorf("the replaced module is %+v, want its replacement with its go.sum hash", last)
	}
	if len(doc.Dependencies) != 1 || len(doc.Dependencies[0].DependsOn) != len(doc.Components) {
		t.Errorf("dependencies %+v, want the binary depending on every component", doc.Dependencies)
	}

	info.Deps = append(info.Deps, &debug.Module{Path: "example.com/local", Replace: &debug.Module{Path: "../local"}})
	if _, err := bom(bin, info, "tally", "v9", at); err == nil {
		t.Error("a module replaced by a directory has no version to name, and no error came")
	}
}
