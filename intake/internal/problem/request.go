package problem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"strconv"
	"strings"

	"tally/vote"
)

// This file owns the refusals every route shares, of a path id, a poll, a
// body's representation and a body not read, and the phrases a detail
// uses to name what the client sent.

// PathID reads the id in the path wildcard name, or answers 400 naming what
// it is (what: "event id", "poll id") and returns false.
func PathID(w http.ResponseWriter, r *http.Request, name, what string) (string, bool) {
	id := r.PathValue(name)
	if !vote.ValidID(id) {
		Write(w, http.StatusBadRequest, BadID,
			fmt.Sprintf("%s %s is invalid: %ss are "+vote.IDRule, what, DescribeID(id), what), 0)
		return "", false
	}
	return id, true
}

// WriteUnknownPoll answers 404 for a poll the caller may not know of: one
// that does not exist, or a restricted one it is not eligible for.
func WriteUnknownPoll(w http.ResponseWriter, id string) {
	Write(w, http.StatusNotFound, UnknownPoll, fmt.Sprintf("there is no poll %q: check the poll id", id), 0)
}

// PlainJSON checks that the body is UTF-8 JSON as it is: Content-Type
// application/json with no charset but utf-8, and no content coding but
// identity. Otherwise it answers 415 and returns false.
func PlainJSON(w http.ResponseWriter, r *http.Request) bool {
	if ce := r.Header["Content-Encoding"]; len(ce) > 0 && !identity(ce) {
		w.Header().Set("Accept-Encoding", "identity") // RFC 9110 15.5.16
		Write(w, http.StatusUnsupportedMediaType, ContentEncoding,
			"the request has Content-Encoding "+Quote(strings.Join(ce, ", "))+
				", but intake takes the body uncompressed: send it without Content-Encoding", 0)
		return false
	}
	ct := r.Header.Get("Content-Type")
	isJSON, isUTF8 := jsonType(ct)
	switch {
	case !isJSON:
		got := "no Content-Type"
		if ct != "" {
			got = "Content-Type " + Quote(ct)
		}
		Write(w, http.StatusUnsupportedMediaType, MediaType,
			"the request has "+got+": send the body as Content-Type: application/json", 0)
		return false
	case !isUTF8:
		Write(w, http.StatusUnsupportedMediaType, MediaType,
			"the request has Content-Type "+Quote(ct)+", but intake takes UTF-8 only: "+
				"send the body in UTF-8 as Content-Type: application/json, with charset=utf-8 or no charset", 0)
		return false
	}
	return true
}

// identity reports whether the Content-Encoding values name no coding but
// identity.
func identity(ce []string) bool {
	for _, v := range ce {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				return false
			}
		}
	}
	return true
}

// jsonType reports whether a Content-Type is application/json, and
// whether its charset, if it names one, is utf-8.
func jsonType(ct string) (isJSON, isUTF8 bool) {
	if ct == "application/json" { // what clients send, without parsing
		return true, true
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return false, false
	}
	cs, named := params["charset"]
	return true, !named || strings.EqualFold(cs, "utf-8")
}

// ReadFailed answers a body that could not be read: 413 with tooLarge as
// its detail when it was too large (the caller names its bound), 408 when
// it stopped arriving (the connection's read deadline passed), 400
// otherwise. The details are generic: the error itself names socket
// addresses, which are none of the client's business.
func ReadFailed(w http.ResponseWriter, err error, tooLarge string) {
	var tooLargeErr *http.MaxBytesError
	switch {
	case errors.As(err, &tooLargeErr):
		Write(w, http.StatusRequestEntityTooLarge, TooLarge, tooLarge, 0)
	case errors.Is(err, os.ErrDeadlineExceeded):
		w.Header().Set("Connection", "close") // RFC 9110 15.5.9
		Write(w, http.StatusRequestTimeout, RequestTimeout,
			"the body stopped arriving before it was complete: send the whole body right after the headers", 0)
	case errors.Is(err, io.ErrUnexpectedEOF):
		Write(w, http.StatusBadRequest, BadRequest,
			"the body ended before the length the request declared: send the whole body", 0)
	default:
		Write(w, http.StatusBadRequest, BadRequest,
			"the body could not be read (a broken connection or a malformed chunked encoding): send the request again", 0)
	}
}

// Quote quotes what a client sent (a key, a header) for a detail,
// shortened so a detail stays small whatever the client sent.
func Quote(k string) string {
	if len(k) > 40 {
		return strconv.Quote(k[:40]) + "..."
	}
	return strconv.Quote(k)
}

// DescribeID names an invalid id for a detail, as a noun phrase that says
// what is wrong with it, without echoing a long one back.
func DescribeID(s string) string {
	switch {
	case s == "":
		return "an empty string"
	case len(s) > vote.MaxIDLen:
		return fmt.Sprintf("a string of %d bytes", len(s))
	}
	for i := range len(s) {
		if !vote.IDChars(s[i : i+1]) {
			return fmt.Sprintf("%q, which has a forbidden character at position %d", s, i+1)
		}
	}
	return strconv.Quote(s)
}

// KindOf names the JSON kind of a token for a detail.
func KindOf(tok json.Token) string {
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			return "an object"
		case '[':
			return "an array"
		}
		return "a stray " + strconv.QuoteRune(rune(t))
	case string:
		return "a string"
	case json.Number, float64:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", tok)
}

// Failed logs an error that made a request fail: a warning, unless the
// client had gone away, which is no news.
func Failed(log *slog.Logger, r *http.Request, msg string, err error) {
	level := slog.LevelWarn
	if errors.Is(err, context.Canceled) || r.Context().Err() == context.Canceled {
		level = slog.LevelDebug
	}
	log.LogAttrs(r.Context(), level, msg, slog.String("route", r.Pattern), slog.String("error", err.Error()))
}
