package intake

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"strings"
	"sync"
)

// The first step of POST /v1/votes: the request's representation (content
// type, charset, content coding) and size, and its body read into a
// recycled buffer and parsed.

// bodyBufs recycles the buffers vote bodies are read into, so a vote
// allocates no buffer for its body. A buffer goes back when handleVote
// returns; what outlives the handler is copied out of it (see voteBody).
var bodyBufs = sync.Pool{New: func() any { return new([maxBodyBytes + 1]byte) }}

// readVote checks the representation and size of the body, reads it into
// buf (room for one byte over maxBodyBytes) and parses it, or answers 415,
// 413, 408 or 400 and returns false.
func readVote(w http.ResponseWriter, r *http.Request, buf []byte) (voteBody, bool) {
	if !plainJSON(w, r) {
		return voteBody{}, false
	}
	if r.ContentLength > maxBodyBytes {
		writeProblem(w, http.StatusRequestEntityTooLarge, probTooLarge,
			fmt.Sprintf("the body is %d bytes, but a vote takes at most %d", r.ContentLength, maxBodyBytes), 0)
		return voteBody{}, false
	}
	body, err := readBody(w, r, buf)
	if err != nil {
		answerReadError(w, err)
		return voteBody{}, false
	}
	v, err := parseVote(body)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, probBadRequest, err.Error(), 0)
		return voteBody{}, false
	}
	return v, true
}

// plainJSON checks that the body is UTF-8 JSON as it is: Content-Type
// application/json with no charset but utf-8, and no content coding but
// identity. Otherwise it answers 415 and returns false.
func plainJSON(w http.ResponseWriter, r *http.Request) bool {
	if ce := r.Header["Content-Encoding"]; len(ce) > 0 && !identity(ce) {
		w.Header().Set("Accept-Encoding", "identity") // RFC 9110 15.5.16
		writeProblem(w, http.StatusUnsupportedMediaType, probContentEncoding,
			"the request has Content-Encoding "+quoteClip(strings.Join(ce, ", "))+
				", but intake takes the body uncompressed: send it without Content-Encoding", 0)
		return false
	}
	ct := r.Header.Get("Content-Type")
	isJSON, isUTF8 := jsonType(ct)
	switch {
	case !isJSON:
		got := "no Content-Type"
		if ct != "" {
			got = "Content-Type " + quoteClip(ct)
		}
		writeProblem(w, http.StatusUnsupportedMediaType, probMediaType,
			"the request has "+got+": send the body as Content-Type: application/json", 0)
		return false
	case !isUTF8:
		writeProblem(w, http.StatusUnsupportedMediaType, probMediaType,
			"the request has Content-Type "+quoteClip(ct)+", but intake takes UTF-8 only: "+
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

// readBody reads the body of r into buf, which has room for one byte over
// maxBodyBytes. A body of a known length was already checked against
// maxBodyBytes, and net/http reads no further than that length; any other
// is read through http.MaxBytesReader, whose error says it was too large.
func readBody(w http.ResponseWriter, r *http.Request, buf []byte) ([]byte, error) {
	rd := r.Body
	if r.ContentLength < 0 {
		rd = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	}
	n := 0
	for n < len(buf) {
		m, err := rd.Read(buf[n:])
		n += m
		if errors.Is(err, io.EOF) {
			return buf[:n], nil
		}
		if err != nil {
			return nil, err
		}
	}
	return nil, &http.MaxBytesError{Limit: maxBodyBytes}
}

// answerReadError answers a body that could not be read: 413 when it was
// too large, 408 when it stopped arriving (the connection's read deadline
// passed), 400 otherwise. The details are generic: the error itself names
// socket addresses, which are none of the client's business.
func answerReadError(w http.ResponseWriter, err error) {
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		writeProblem(w, http.StatusRequestEntityTooLarge, probTooLarge,
			fmt.Sprintf("the body is over %d bytes, the most a vote takes", maxBodyBytes), 0)
	case errors.Is(err, os.ErrDeadlineExceeded):
		w.Header().Set("Connection", "close") // RFC 9110 15.5.9
		writeProblem(w, http.StatusRequestTimeout, probRequestTimeout,
			"the body stopped arriving before it was complete: send the whole body right after the headers", 0)
	case errors.Is(err, io.ErrUnexpectedEOF):
		writeProblem(w, http.StatusBadRequest, probBadRequest,
			"the body ended before the length the request declared: send the whole body", 0)
	default:
		writeProblem(w, http.StatusBadRequest, probBadRequest,
			"the body could not be read (a broken connection or a malformed chunked encoding): send the request again", 0)
	}
}
