// Package apitest checks HTTP exchanges with intake against intake's
// OpenAPI document, so that the document and the server cannot drift: a
// test that sends a request through a checked client fails when the answer
// has a status, header or body the document does not give the route, or
// when intake accepted a request the document refuses.
//
// The document is given as bytes (intake.OpenAPIDocument()), so that the
// intake package's own tests may use this package too.
//
// Files:
//
//   - apitest.go: Contract, the loaded document, and its checks of one
//     exchange (Check) or of an answer alone (CheckAnswer);
//   - transport.go: Transport, a RoundTripper that checks every exchange
//     it carries and fails the test on a mismatch; SampledTransport, the
//     same for a load test, checking a sample of each kind of exchange.
package apitest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// Contract is an OpenAPI document loaded, validated and routed once. It is
// safe for concurrent use.
type Contract struct {
	doc    *openapi3.T
	router routers.Router
	// The answers to a request no operation of the document takes: any
	// path not spelled as a route, and a method its route does not take.
	notFound, notAllowed *openapi3.ResponseRef
}

// Load reads an OpenAPI 3.1 document and validates it. The document must
// have the component responses RouteNotFound and MethodNotAllowed: the
// answers to requests none of its operations takes.
func Load(doc []byte) (*Contract, error) {
	ctx := context.Background()
	t, err := openapi3.NewLoader().LoadFromData(doc)
	if err != nil {
		return nil, fmt.Errorf("load the OpenAPI document: %w", err)
	}
	if !t.IsOpenAPI31OrLater() {
		return nil, fmt.Errorf("the OpenAPI document is version %s, want 3.1", t.OpenAPI)
	}
	if err := t.Validate(ctx); err != nil {
		return nil, fmt.Errorf("the OpenAPI document is invalid: %w", err)
	}
	// The servers name where a deployment listens; a test serves on a
	// port of its own, so the routes are matched by path alone.
	routed := *t
	routed.Servers = nil
	router, err := gorillamux.NewRouter(&routed)
	if err != nil {
		return nil, fmt.Errorf("route the OpenAPI document: %w", err)
	}
	c := &Contract{doc: t, router: router}
	if t.Components != nil {
		c.notFound = t.Components.Responses["RouteNotFound"]
		c.notAllowed = t.Components.Responses["MethodNotAllowed"]
	}
	if c.notFound == nil || c.notAllowed == nil {
		return nil, errors.New("the OpenAPI document has no components.responses RouteNotFound and MethodNotAllowed: add them, they say what a request to no operation gets")
	}
	return c, nil
}

// Check checks one exchange: req with its body reqBody (req.Body itself
// is not read), answered with status, header and body. It fails when the
// answer is not one the document gives req's operation (status, required
// headers, content type, body), or when the document refuses req (its
// parameters, body or bearer token) and intake answered it below 400.
func (c *Contract) Check(req *http.Request, reqBody []byte, status int, header http.Header, body []byte) error {
	in, err := c.input(req)
	if err != nil {
		return err
	}
	var reqErr error
	if in.Route.PathItem != nil { // an operation of the document
		r := req.Clone(req.Context())
		r.Body = io.NopCloser(bytes.NewReader(reqBody))
		in.Request = r
		reqErr = openapi3filter.ValidateRequest(req.Context(), in)
	}
	if err := c.checkAnswer(in, status, header, body); err != nil {
		return err
	}
	if reqErr != nil && status < 400 {
		return fmt.Errorf("%s: the OpenAPI document refuses the request, yet intake answered %d: %v", name(in), status, reqErr)
	}
	return nil
}

// CheckAnswer checks an answer alone, for a request a test wrote as raw
// bytes (a malformed framing no validator parses, a body that never
// arrives): method and target are its request line's.
func (c *Contract) CheckAnswer(method, target string, status int, header http.Header, body []byte) error {
	u := &url.URL{Opaque: target}
	if strings.HasPrefix(target, "/") {
		var err error
		if u, err = url.ParseRequestURI(target); err != nil {
			return fmt.Errorf("%s %s: not a request target: %v", method, target, err)
		}
	}
	req := (&http.Request{Method: method, URL: u, Header: http.Header{}}).WithContext(context.Background())
	in, err := c.input(req)
	if err != nil {
		return err
	}
	return c.checkAnswer(in, status, header, body)
}

// input finds the operation of req. A request no operation takes gets one
// made up with the only answer the document gives it: RouteNotFound or
// MethodNotAllowed. HEAD is routed as GET, as intake answers it; its
// answer has no body to check.
func (c *Contract) input(req *http.Request) (*openapi3filter.RequestValidationInput, error) {
	find := req
	if req.Method == http.MethodHead {
		find = req.Clone(req.Context())
		find.Method = http.MethodGet
	}
	route, params, err := c.router.FindRoute(find)
	switch {
	case errors.Is(err, routers.ErrPathNotFound):
		route = c.madeUp(req, "no route", http.StatusNotFound, c.notFound)
	case errors.Is(err, routers.ErrMethodNotAllowed):
		route = c.madeUp(req, "no such method", http.StatusMethodNotAllowed, c.notAllowed)
	case err != nil:
		return nil, fmt.Errorf("%s %s: find its route in the OpenAPI document: %w", req.Method, req.URL.Path, err)
	}
	return &openapi3filter.RequestValidationInput{
		Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: bearer},
	}, nil
}

// madeUp is a route for a request no operation of the document takes,
// whose one answer is resp.
func (c *Contract) madeUp(req *http.Request, what string, status int, resp *openapi3.ResponseRef) *routers.Route {
	return &routers.Route{
		Spec:   c.doc,
		Path:   req.URL.Path,
		Method: req.Method,
		Operation: &openapi3.Operation{
			OperationID: what,
			Responses:   openapi3.NewResponses(openapi3.WithStatus(status, resp)),
		},
	}
}

// checkAnswer checks an answer against the operation of in, which must
// list its status.
func (c *Contract) checkAnswer(in *openapi3filter.RequestValidationInput, status int, header http.Header, body []byte) error {
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 status,
		Header:                 header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true},
	}
	out.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(in.Request.Context(), out); err != nil {
		return fmt.Errorf("%s: the answer %d does not match the OpenAPI document: %v\nanswer: %s", name(in), status, err, clip(body))
	}
	return nil
}

// bearer is the check of the document's bearer scheme: exactly one
// Authorization header, "Bearer" and a token. Whether the token is known
// is intake's to say.
func bearer(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	hs := in.RequestValidationInput.Request.Header.Values("Authorization")
	if len(hs) != 1 {
		return fmt.Errorf("%d Authorization headers, want one", len(hs))
	}
	scheme, token, _ := strings.Cut(hs[0], " ")
	if !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return errors.New(`the Authorization header is not "Bearer TOKEN"`)
	}
	return nil
}

// name names the exchange of in in an error: method, path and the
// document's operation.
func name(in *openapi3filter.RequestValidationInput) string {
	if in.Route.PathItem == nil {
		return fmt.Sprintf("%s %s (%s in the document)", in.Request.Method, in.Request.URL.Path, in.Route.Operation.OperationID)
	}
	return fmt.Sprintf("%s %s (%s %s, operation %s)", in.Request.Method, in.Request.URL.Path,
		in.Route.Method, in.Route.Path, in.Route.Operation.OperationID)
}

// clip is body for an error message, cut to a readable length.
func clip(body []byte) string {
	const most = 512
	if len(body) > most {
		return string(body[:most]) + "..."
	}
	return string(body)
}
