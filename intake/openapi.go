package intake

import (
	"bytes"
	_ "embed"
	"net/http"
)

// This file owns GET /openapi.json: the OpenAPI 3.1 document of intake's
// HTTP surface, embedded in the binary so that the document a client reads
// is the one this build was tested against.

const routeOpenAPI = "/openapi.json"

// openAPIDocument is openapi.json, the contract of every route, status,
// header and body intake answers. Every HTTP test validates its requests
// and answers against it, so the document and the server cannot drift.
//
//go:embed openapi.json
var openAPIDocument []byte

// OpenAPIDocument returns a copy of the OpenAPI 3.1 document intake serves
// at GET /openapi.json, for tools and tests that check requests and
// answers against it.
func OpenAPIDocument() []byte { return bytes.Clone(openAPIDocument) }

// handleOpenAPI answers the embedded document as it is. It needs no
// token: a client reads it to learn how to authenticate.
func handleOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(openAPIDocument)
}
