package intake_test

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"tally/intake"
)

// This file tests the OpenAPI document: it is valid OpenAPI 3.1, it is
// what GET /openapi.json serves, it lists every problem type intake has,
// and it is strict enough that a drifted answer fails the check every
// HTTP test goes through.

// TestOpenAPIDocumentValid loads the document with kin-openapi's loader
// and validates it as OpenAPI 3.1.
func TestOpenAPIDocumentValid(t *testing.T) {
	if _, err := contract(); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OpenAPI string `json:"openapi"`
	}
	if err := json.Unmarshal(intake.OpenAPIDocument(), &doc); err != nil || doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q (%v), want 3.1.0", doc.OpenAPI, err)
	}
}

// TestOpenAPIServed: GET /openapi.json needs no token and answers the
// embedded document byte for byte, as JSON; so do the other routes
// without a token, each as the document says.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.do(t, http.MethodGet, "/openapi.json", "", "", nil)
	if r.code != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, Content-Type %q", r.code, r.header.Get("Content-Type"))
	}
	if want := intake.OpenAPIDocument(); r.raw != string(want) {
		t.Fatalf("served %d bytes that differ from the %d of the embedded document", len(r.raw), len(want))
	}
	onDisk, err := os.ReadFile("openapi.json")
	if err != nil || !bytes.Equal(onDisk, intake.OpenAPIDocument()) {
		t.Fatalf("the embedded document is not intake/openapi.json (%v)", err)
	}
	if r := b.do(t, http.MethodPost, "/openapi.json", "", "application/json", []byte("{}")); r.code != http.StatusMethodNotAllowed {
		t.Fatalf("POST /openapi.json: %d, want 405", r.code)
	}
	// The routes without a token answer as the document says (send checks).
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if r := b.do(t, http.MethodGet, path, "", "", nil); r.code != http.StatusOK {
			t.Errorf("GET %s: %d: %s", path, r.code, r.raw)
		}
	}
}

// TestOpenAPIProblemTypes: the document's ProblemType lists exactly the
// problem types intake's code declares (every problemType literal of the
// package), each with a title and a meaning. ProblemType is a string enum,
// which generated clients type as one; the titles and meanings sit beside
// it in x-enum-titles and x-enumDescriptions.
func TestOpenAPIProblemTypes(t *testing.T) {
	inCode := problemTypesInCode(t)
	var doc struct {
		Components struct {
			Schemas struct {
				ProblemType struct {
					Type         string            `json:"type"`
					Enum         []string          `json:"enum"`
					Titles       map[string]string `json:"x-enum-titles"`
					Descriptions map[string]string `json:"x-enumDescriptions"`
				} `json:"ProblemType"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(intake.OpenAPIDocument(), &doc); err != nil {
		t.Fatal(err)
	}
	pt := doc.Components.Schemas.ProblemType
	if pt.Type != "string" || len(pt.Titles) != len(pt.Enum) || len(pt.Descriptions) != len(pt.Enum) {
		t.Errorf("ProblemType: type %q, %d values, %d titles, %d descriptions; want a string enum with a title and a description for each value",
			pt.Type, len(pt.Enum), len(pt.Titles), len(pt.Descriptions))
	}
	var inDoc []string
	for _, uri := range pt.Enum {
		slug, ok := strings.CutPrefix(uri, "urn:tally:problem:")
		if !ok || pt.Descriptions[uri] == "" {
			t.Errorf("ProblemType %q: want urn:tally:problem:SLUG with a description", uri)
		}
		if want, ok := inCode[slug]; ok && pt.Titles[uri] != want {
			t.Errorf("ProblemType %s: title %q, but intake answers %q", slug, pt.Titles[uri], want)
		}
		inDoc = append(inDoc, slug)
	}
	for slug := range inCode {
		if !slices.Contains(inDoc, slug) {
			t.Errorf("problem type %s is in intake's code but not in the document's ProblemType: add it with its meaning", slug)
		}
	}
	for _, slug := range inDoc {
		if _, ok := inCode[slug]; !ok {
			t.Errorf("the document's ProblemType lists %s, which intake never answers: remove it", slug)
		}
	}
}

// problemTypesInCode reads every problem type literal (problemType or
// problem.Type, {Slug: ..., Title: ...}) in the source of intake and of
// the packages it mounts: slug to title.
func problemTypesInCode(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	inner, err := filepath.Glob("internal/*/*.go")
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]string{}
	fset := token.NewFileSet()
	for _, name := range append(files, inner...) {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok || !isProblemType(lit.Type) || len(lit.Elts) != 2 {
				return true
			}
			slug, title, ok := slugAndTitle(lit)
			if !ok {
				t.Fatalf("%s: a problem type literal that is not {Slug: a string, Title: a string}", fset.Position(lit.Pos()))
			}
			types[slug] = title
			return true
		})
	}
	if len(types) < 10 {
		t.Fatalf("found %d problem types in the code; the scan is broken", len(types))
	}
	return types
}

// isProblemType reports whether a literal's type is spelled problemType,
// problem.Type, or Type (in package problem).
func isProblemType(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name == "problemType" || e.Name == "Type"
	case *ast.SelectorExpr:
		x, ok := e.X.(*ast.Ident)
		return ok && x.Name == "problem" && e.Sel.Name == "Type"
	}
	return false
}

// slugAndTitle reads the strings of {Slug: ..., Title: ...}.
func slugAndTitle(lit *ast.CompositeLit) (slug, title string, ok bool) {
	fields := map[string]string{}
	for _, e := range lit.Elts {
		kv, isKV := e.(*ast.KeyValueExpr)
		if !isKV {
			return "", "", false
		}
		key, isIdent := kv.Key.(*ast.Ident)
		val, isLit := kv.Value.(*ast.BasicLit)
		if !isIdent || !isLit {
			return "", "", false
		}
		v, err := strconv.Unquote(val.Value)
		if err != nil {
			return "", "", false
		}
		fields[key.Name] = v
	}
	slug, okSlug := fields["Slug"]
	title, okTitle := fields["Title"]
	return slug, title, okSlug && okTitle
}

// TestOpenAPIRejectsDrift: answers and requests that drifted from the
// document fail the check every HTTP test goes through, and the right
// ones pass it.
func TestOpenAPIRejectsDrift(t *testing.T) {
	c, err := contract()
	if err != nil {
		t.Fatal(err)
	}
	const (
		accepted = `{"event_id":"e1","status":"pending","status_url":"/v1/votes/e1"}`
		vote     = `{"event_id":"e1","poll_id":"p1","candidate_id":"a"}`
	)
	jsonHeader := func(kv ...string) http.Header {
		h := http.Header{"Content-Type": {"application/json"}, "Cache-Control": {"no-store"}}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	problemHeader := func(kv ...string) http.Header {
		h := jsonHeader(kv...)
		h.Set("Content-Type", "application/problem+json")
		return h
	}
	problem := func(slug string, status int) string {
		return `{"type":"urn:tally:problem:` + slug + `","title":"T","status":` + strconv.Itoa(status) + `,"detail":"D"}`
	}
	for _, tc := range []struct {
		name         string
		method, path string
		auth         string
		reqBody      string
		code         int
		header       http.Header
		body         string
		fail         string // a part of the error; "" when it must pass
	}{
		{"202 as documented", "POST", "/v1/votes", "Bearer x", vote, 202, jsonHeader("Location", "/v1/votes/e1"), accepted, ""},
		{"202 with an extra field", "POST", "/v1/votes", "Bearer x", vote, 202, jsonHeader("Location", "/v1/votes/e1"),
			`{"event_id":"e1","status":"pending","status_url":"/v1/votes/e1","counted":true}`, "counted"},
		{"202 with an unknown status", "POST", "/v1/votes", "Bearer x", vote, 202, jsonHeader("Location", "/v1/votes/e1"),
			`{"event_id":"e1","status":"counted","status_url":"/v1/votes/e1"}`, "status"},
		{"202 without Location", "POST", "/v1/votes", "Bearer x", vote, 202, jsonHeader(), accepted, "Location"},
		{"202 without Cache-Control", "POST", "/v1/votes", "Bearer x", vote, 202,
			http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/votes/e1"}}, accepted, "Cache-Control"},
		{"202 as problem+json", "POST", "/v1/votes", "Bearer x", vote, 202, problemHeader("Location", "/v1/votes/e1"), accepted, "Content-Type"},
		{"a status the route never answers", "POST", "/v1/votes", "Bearer x", vote, 418, problemHeader(), problem("internal", 418), "status is not supported"},
		{"202 to a vote without candidate_id", "POST", "/v1/votes", "Bearer x", `{"event_id":"e1","poll_id":"p1"}`, 202,
			jsonHeader("Location", "/v1/votes/e1"), accepted, "refuses the request"},
		{"202 to a vote without a token", "POST", "/v1/votes", "", vote, 202, jsonHeader("Location", "/v1/votes/e1"), accepted, "refuses the request"},
		{"400 to a vote without candidate_id", "POST", "/v1/votes", "Bearer x", `{"event_id":"e1","poll_id":"p1"}`, 400,
			problemHeader(), problem("invalid-request", 400), ""},
		{"429 without Retry-After", "POST", "/v1/votes", "Bearer x", vote, 429, problemHeader(), problem("rate-limited", 429), "Retry-After"},
		{"503 of another route's type", "POST", "/v1/votes", "Bearer x", vote, 503, problemHeader("Retry-After", "1"), problem("key-reused", 503), "type"},
		{"503 with status 500 in the body", "POST", "/v1/votes", "Bearer x", vote, 503, problemHeader("Retry-After", "1"), problem("not-queued", 500), "status"},
		{"a problem with an unknown type", "POST", "/v1/votes", "Bearer x", vote, 409, problemHeader(), problem("oops", 409), "type"},
		{"a problem with an extra field", "POST", "/v1/votes", "Bearer x", vote, 409, problemHeader(),
			`{"type":"urn:tally:problem:key-reused","title":"T","status":409,"detail":"D","instance":"x"}`, "instance"},
		{"401 without WWW-Authenticate", "GET", "/v1/votes/e1", "", "", 401, problemHeader(), problem("unauthorized", 401), "WWW-Authenticate"},
		{"401 with a challenge", "GET", "/v1/votes/e1", "", "", 401, problemHeader("WWW-Authenticate", `Bearer error="invalid_token"`), problem("unauthorized", 401), ""},
		{"a rejected event without reason", "GET", "/v1/votes/e1", "Bearer x", "", 200, jsonHeader(),
			`{"event_id":"e1","poll_id":"p1","candidate_id":"a","status":"rejected"}`, "reason"},
		{"a recorded event with a reason", "GET", "/v1/votes/e1", "Bearer x", "", 200, jsonHeader(),
			`{"event_id":"e1","poll_id":"p1","candidate_id":"a","status":"recorded","reason":"poll_closed"}`, "reason"},
		{"a rejected event with an unknown reason", "GET", "/v1/votes/e1", "Bearer x", "", 200, jsonHeader(),
			`{"event_id":"e1","poll_id":"p1","candidate_id":"a","status":"rejected","reason":"bored"}`, "reason"},
		{"a rejected event", "GET", "/v1/votes/e1", "Bearer x", "", 200, jsonHeader(),
			`{"event_id":"e1","poll_id":"p1","candidate_id":"a","status":"rejected","reason":"poll_closed"}`, ""},
		{"results with a negative count", "GET", "/v1/polls/p1/results", "Bearer x", "", 200, jsonHeader(),
			`{"poll_id":"p1","results":[{"candidate_id":"a","votes":-1}],"total":0,"as_of":"2026-01-02T03:04:05Z"}`, "votes"},
		{"results with an id that is not an id", "GET", "/v1/polls/p1/results", "Bearer x", "", 200, jsonHeader(),
			`{"poll_id":"p 1","results":[],"total":0,"as_of":"2026-01-02T03:04:05Z"}`, "poll_id"},
		{"readyz 503 without Retry-After", "GET", "/readyz", "", "", 503, jsonHeader(),
			`{"status":"not ready","checks":{"postgres":"unreachable","redis":"ok","backlog":"ok"},"down":["postgres"]}`, "Retry-After"},
		{"readyz 200 not ready", "GET", "/readyz", "", "", 200, jsonHeader(),
			`{"status":"not ready","checks":{"postgres":"ok","redis":"ok","backlog":"ok"}}`, "status"},
		{"an unknown route answered 200", "GET", "/v2/votes", "", "", 200, jsonHeader(), `{}`, "status is not supported"},
		{"an unknown route answered 404", "GET", "/v2/votes", "", "", 404, problemHeader(), problem("not-found", 404), ""},
		{"405 without Allow", "DELETE", "/v1/votes", "", "", 405, problemHeader(), problem("method-not-allowed", 405), "Allow"},
		{"405 with Allow", "DELETE", "/v1/votes", "", "", 405, problemHeader("Allow", "POST"), problem("method-not-allowed", 405), ""},
	} {
		req, err := http.NewRequest(tc.method, "http://intake"+tc.path, strings.NewReader(tc.reqBody))
		if err != nil {
			t.Fatal(err)
		}
		if tc.reqBody != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		err = c.Check(req, []byte(tc.reqBody), tc.code, tc.header, []byte(tc.body))
		switch {
		case tc.fail == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.fail != "" && err == nil:
			t.Errorf("%s: passed the check, want it refused", tc.name)
		case tc.fail != "" && !strings.Contains(err.Error(), tc.fail):
			t.Errorf("%s: %v; want an error that names %q", tc.name, err, tc.fail)
		}
	}
}
