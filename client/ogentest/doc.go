// Package ogentest builds ogen's client of intake (ogenclient/, generated
// from intake/openapi.json with ogen.yml) and drives a real intake with it
// in its test, as the client package's tests do with oapi-codegen's. It is
// a module of its own so that ogen's runtime stays out of tally's go.mod.
//
// go generate (in this directory) writes ogenclient/ again; make lint
// fails when it differs from what ogen generates from the document.
// make test runs its test.
package ogentest

//go:generate go run github.com/ogen-go/ogen/cmd/ogen@v1.25.0 --config ogen.yml --target ogenclient --package ogenclient --clean ../../intake/openapi.json
