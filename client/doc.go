// Package client is a Go client of tally's intake, generated from its
// OpenAPI document (intake/openapi.json), with a thin layer on top that
// does what every caller of a vote API must otherwise write by hand.
//
// Client (client.go) votes, reads a vote's status and a poll's results,
// and creates polls (an admin's token). Each call:
//
//   - sends a vote again with the same event_id when it got no answer,
//     or 408, 429, 502, 503 or 504: intake never counts one event_id
//     twice, so a retry is safe however the first attempt ended;
//   - waits the answer's Retry-After before the next attempt, and
//     otherwise doubles its wait from Config.BackoffMin to
//     Config.BackoffMax with full jitter;
//   - gives up after Config.MaxAttempts requests or Config.MaxElapsed,
//     whichever comes first, and never waits past the context's deadline;
//   - returns intake's refusal as a *Problem (problem.go), the RFC 9457
//     document with its type, title, status and detail:
//     errors.As(err, &p) tells a refused vote from a lost connection.
//
// Every operation of the document is also there as generated
// (api.gen.go, Client.API): its request builder, its typed answers
// (ClientWithResponses) and every schema as a Go type. api.gen.go is
// written by oapi-codegen, pinned, with the settings in
// oapi-codegen.yaml; go generate ./client writes it again, and make lint
// (scripts/openapi-generators.sh) fails when it differs from what the
// document gives. oapi-codegen is used rather than ogen because its code
// needs one small runtime module (github.com/oapi-codegen/runtime), where
// ogen's needs its own runtime, go-faster/jx and OpenTelemetry; ogen's
// client is built and driven against a real intake in the module
// client/ogentest, which keeps its dependencies out of tally's go.mod.
//
// Files:
//
//   - client.go: Config, New, Client and its calls;
//   - retry.go: the attempts of one call: what is retried, and the wait;
//   - problem.go: Problem, the error of an answer that refused a call;
//   - api.gen.go: generated; do not edit.
package client

//go:generate go run github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@v2.8.2 -config oapi-codegen.yaml ../intake/openapi.json
