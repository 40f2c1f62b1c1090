package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"time"

	"tally/intake/internal/problem"
	"tally/ledger"
)

// This file owns what the admin routes share: the admin's authentication
// (a principal of role admin, within its reads' rate), the strict reading
// of a request body into its struct, and the one table from the ledger's
// errors to the answers of an admin write.

// byteOrderMark is the UTF-8 encoding of U+FEFF, which some editors and
// Windows tools put before a text; JSON forbids it (RFC 8259 8.1).
var byteOrderMark = []byte("\xef\xbb\xbf")

// maxAdminBodyBytes bounds the body of an admin request: 10,000 names of
// 200 bytes, with their quotes, fit.
const maxAdminBodyBytes = 4 << 20

// MaxPrincipalsPerRequest bounds the names one POST /v1/principals takes.
const MaxPrincipalsPerRequest = 10_000

// admin authenticates the request as a principal of role admin and spends
// one of its reads (intake's Config.ReadRate), or answers 400, 401, 403,
// 429 or 503 and returns false.
func (a *Admin) admin(w http.ResponseWriter, r *http.Request) (Principal, bool) {
	p, ok := a.auth.Authenticate(w, r)
	if !ok {
		return Principal{}, false
	}
	if p.Role != ledger.RoleAdmin {
		problem.Write(w, http.StatusForbidden, probForbidden,
			"this route manages polls and principals and takes an admin's token; your principal is a voter: "+
				"an operator issues admin tokens with tally principal add, as admins (or grants the role by an "+
				"OpenID Connect issuer's admin claim)", 0)
		return Principal{}, false
	}
	if !a.auth.SpendRead(w, p.ID) {
		return Principal{}, false
	}
	return p, true
}

// principal authenticates the request as any principal and spends one of
// its reads, or answers 400, 401, 429 or 503 and returns false.
func (a *Admin) principal(w http.ResponseWriter, r *http.Request) (Principal, bool) {
	p, ok := a.auth.Authenticate(w, r)
	if !ok || !a.auth.SpendRead(w, p.ID) {
		return Principal{}, false
	}
	return p, true
}

// readAdminBody reads the JSON object of the request into v, refusing
// keys v does not have and anything after the object, or answers 413,
// 415 or 400 naming what is wrong and returns false. An empty body is
// taken as {} when empty is true.
func readAdminBody(w http.ResponseWriter, r *http.Request, v any, shape string, empty bool) bool {
	if r.ContentLength == 0 && empty {
		return true
	}
	body, ok := readAdminBytes(w, r)
	if !ok {
		return false
	}
	if len(bytes.TrimSpace(body)) == 0 && empty {
		return true
	}
	return decodeAdminBody(w, body, v, shape)
}

// readAdminBytes reads the body of an admin request, or answers 413, 415
// or 400 and returns false.
func readAdminBytes(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if !problem.PlainJSON(w, r) {
		return nil, false
	}
	if r.ContentLength > maxAdminBodyBytes {
		problem.Write(w, http.StatusRequestEntityTooLarge, problem.TooLarge,
			fmt.Sprintf("the body is %d bytes, but an admin request takes at most %d: split it", r.ContentLength, maxAdminBodyBytes), 0)
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxAdminBodyBytes))
	if err != nil {
		problem.ReadFailed(w, err, fmt.Sprintf("the body is over %d bytes, the most an admin request takes: split it", maxAdminBodyBytes))
		return nil, false
	}
	return body, true
}

// decodeAdminBody decodes body strictly into v (decodeStrict), or
// answers 400 naming what is wrong and returns false.
func decodeAdminBody(w http.ResponseWriter, body []byte, v any, shape string) bool {
	if err := decodeStrict(body, v); err != nil {
		problem.Write(w, http.StatusBadRequest, problem.BadRequest, err.Error()+": send "+shape, 0)
		return false
	}
	return true
}

// decodeStrict decodes one JSON object into v, or says what is wrong and
// where, as the vote route does: the byte where the JSON breaks, the key
// that is not the route's, the field whose value does not fit and what it
// takes. The steps: the body is one JSON value and nothing more, it is an
// object, its keys are v's (exactKeys), its values fit v's fields.
func decodeStrict(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return errors.New("the body is empty")
	}
	if bytes.HasPrefix(bytes.TrimLeft(body, " \t\n\r"), byteOrderMark) {
		return errors.New("the body starts with a byte order mark (BOM): send UTF-8 JSON without it")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return jsonBroken(err, len(body))
	}
	// More would miss a closing bracket after the object; a token would not.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("the body goes on after the JSON object, at byte %d: send one object and nothing else", dec.InputOffset()+1)
	}
	if first, _ := json.NewDecoder(bytes.NewReader(raw)).Token(); first != json.Delim('{') {
		return fmt.Errorf("the body must be a JSON object, not %s", problem.KindOf(first))
	}
	if err := exactKeys(raw, v); err != nil {
		_ = json.Unmarshal(raw, v) // what can be read, so that an answer names the poll it refuses
		return err
	}
	dec = json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &typeErr) && typeErr.Field != "":
		return fmt.Errorf("the value of %q is %s: it takes %s", typeErr.Field, withArticle(typeErr.Value), jsonKindOf(typeErr.Type))
	case err != nil:
		// Not expected once the keys are the route's; say what the decoder said.
		return fmt.Errorf("the body does not fit: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

// jsonBroken is the refusal of a body that is not valid JSON: where it
// breaks, or that it ends too soon. size is the body's length.
func jsonBroken(err error, size int) error {
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &syntaxErr):
		// Offset counts the bytes read up to and including the one at fault.
		return fmt.Errorf("the body is not valid JSON at byte %d (%s): send one JSON object", syntaxErr.Offset, syntaxErr.Error())
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("the body is not valid JSON: it ends before the object is closed (after byte %d): send the whole object", size)
	}
	return fmt.Errorf("the body is not valid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// withArticle names a JSON kind as encoding/json reports it ("string",
// "number 1e99") for a detail.
func withArticle(kind string) string {
	switch {
	case kind == "array" || kind == "object":
		return "an " + kind
	case kind == "bool":
		return "a boolean"
	case strings.HasPrefix(kind, "number "):
		return "the number " + strings.TrimPrefix(kind, "number ")
	}
	return "a " + kind
}

// jsonKindOf names the JSON a field of type t takes, for a detail.
func jsonKindOf(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a number (a whole one)"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.String {
			return "an array of strings"
		}
		return "an array"
	}
	return "an object"
}

// exactKeys refuses a key of the body's object spelled otherwise than
// v's json tag (encoding/json matches keys without regard to case) and a
// key given twice (it keeps the last): the document names each key once,
// in one spelling. It looks into the objects of v's fields that are
// structs too (a poll's ballot). body is one valid JSON object.
func exactKeys(body []byte, v any) error {
	return exactKeysOf(body, reflect.TypeOf(v).Elem(), "")
}

// exactKeysOf is exactKeys for the object obj of type t, the value of the
// key path (such as "ballot.") in the body; path is "" for the body.
func exactKeysOf(obj []byte, t reflect.Type, path string) error {
	known := map[string]reflect.Type{}
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		known[name] = t.Field(i).Type
	}
	dec := json.NewDecoder(bytes.NewReader(obj))
	dec.Token() // the opening brace
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("the body is not JSON: %v", err)
		}
		key, _ := tok.(string)
		ft, ok := known[key]
		switch {
		case !ok && path == "":
			return fmt.Errorf("the body has the key %s, which is not one of the route's (keys are lowercase, as documented)", problem.Quote(key))
		case !ok:
			return fmt.Errorf("the body has the key %s in %q, which is not one of its (keys are lowercase, as documented)", problem.Quote(key), strings.TrimSuffix(path, "."))
		case seen[key]:
			return fmt.Errorf("the body has the key %q twice: give each once", path+key)
		}
		seen[key] = true
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return fmt.Errorf("the body is not JSON: %v", err)
		}
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft != reflect.TypeFor[time.Time]() && bytes.HasPrefix(val, []byte("{")) {
			if err := exactKeysOf(val, ft, path+key+"."); err != nil {
				return err
			}
		}
	}
	return nil
}

// parseTimeField reads an RFC 3339 time of the body's key field; nil for
// an absent or empty one.
func parseTimeField(field string, v *string) (*time.Time, error) {
	if v == nil || *v == "" {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339, *v)
	if err != nil {
		return nil, &ledger.FieldError{Op: "read the body", Field: field,
			Reason: fmt.Sprintf("%q is not an RFC 3339 time such as 2026-12-01T17:00:00Z", *v)}
	}
	if t.Before(time.Unix(0, 0)) { // the audit reads no time before 1970 (docs/audit.md, "Times")
		return nil, &ledger.FieldError{Op: "read the body", Field: field,
			Reason: fmt.Sprintf("%q is before 1970-01-01T00:00:00Z, which the audit of the poll's log refuses; give a later time", *v)}
	}
	return &t, nil
}

// writeFailed answers the error of an admin write: 400 naming the
// field at fault, 422 naming the field and the stated limit it is over, 404, 501 when this intake's database login may not make
// the change, 503 when the request's time ran out before it was sent to
// PostgreSQL (nothing was stored) or PostgreSQL did not answer (nothing
// was stored, or the write may have committed: sending it again is safe,
// as each write is idempotent but principals', which names it), 500
// otherwise.
func (a *Admin) writeFailed(w http.ResponseWriter, r *http.Request, err error) {
	var field *ledger.FieldError
	switch {
	case errors.As(err, &field):
		status, prob, detail, _ := pollRefused(err)
		problem.Write(w, status, prob, detail, 0)
	case errors.Is(err, ledger.ErrNotPermitted):
		problem.Failed(a.log, r, "admin write refused by the database", err)
		problem.Write(w, http.StatusNotImplemented, probNotConfigured,
			"this intake may not manage polls and principals: its database login is not granted tally_admin "+
				"(an operator grants it, docs/operations.md); nothing was changed", 0)
	case errors.Is(err, ErrNotSent):
		problem.Write(w, http.StatusServiceUnavailable, problem.Unavailable,
			"the request's time ran out before its change was sent to the database (its body came slowly, or intake is busy), "+
				"so nothing was stored: send the same request again after the Retry-After delay", time.Second)
	case a.ledger.Skipped(err) || ledger.IsRetryable(err) || r.Context().Err() != nil:
		detail := "the database (PostgreSQL) did not answer, so the change may not be stored: " +
			"send the same request again after the Retry-After delay"
		if !a.ledger.Skipped(err) {
			problem.Failed(a.log, r, "admin write failed", err)
			if r.Pattern == RoutePrincipals && r.Header.Get(idempotencyKeyHeader) == "" {
				detail += "; adding principals without an Idempotency-Key header is not idempotent: if this request was stored after all, " +
					"the principals it added hold credentials nobody was shown (tally principal list shows them, " +
					"tally principal revoke removes them); send an Idempotency-Key to make a retry safe"
			}
		}
		problem.Write(w, http.StatusServiceUnavailable, problem.Unavailable, detail, time.Second)
	default:
		problem.Failed(a.log, r, "admin write failed", err)
		problem.Write(w, http.StatusInternalServerError, problem.Internal,
			"intake failed on this request; it has been logged: retry later, and report it if it persists", 0)
	}
}
