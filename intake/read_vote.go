package intake

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"tally/intake/internal/problem"
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
	if !problem.PlainJSON(w, r) {
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

// answerReadError answers a vote's body that could not be read
// (problem.ReadFailed).
func answerReadError(w http.ResponseWriter, err error) {
	problem.ReadFailed(w, err, fmt.Sprintf("the body is over %d bytes, the most a vote takes", maxBodyBytes))
}
