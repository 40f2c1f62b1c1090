package credential

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// This file owns the decoding of the claims of tally's own tokens: the
// form Issue writes is read without reflection (a token is verified on
// every vote); every other form goes to encoding/json, so that both read
// any claims alike (FuzzClaimsDecode).

// UnmarshalJSON decodes c from b, which must be a JSON object, into a
// zero c: it is the fast path for a flat object of the names Issue
// writes with plain string and integer values, and encoding/json's
// decoding otherwise.
func (c *claims) UnmarshalJSON(b []byte) error {
	*c = claims{}
	if c.scan(b) {
		return nil
	}
	*c = claims{}
	type plain claims // claims without this method
	return json.Unmarshal(b, (*plain)(c))
}

// scan reads b into c when b is an object of the form Issue writes, and
// returns false, c in any state, for any other form.
func (c *claims) scan(b []byte) bool {
	s := claimScanner{b: b}
	if !s.byte('{') {
		return false
	}
	if s.byte('}') {
		return s.end()
	}
	for {
		name, ok := s.plainString()
		if !ok || !s.byte(':') || !c.set(name, &s) {
			return false
		}
		if s.byte('}') {
			return s.end()
		}
		if !s.byte(',') {
			return false
		}
	}
}

// set reads the value of the claim name from s into c; false for a name
// Issue does not write, or a value not of its plain form.
func (c *claims) set(name []byte, s *claimScanner) bool {
	switch string(name) {
	case "iss":
		v, ok := s.plainString()
		c.Issuer = intern(v, Issuer)
		return ok
	case "sub":
		v, ok := s.plainString()
		c.Subject = string(v)
		return ok
	case "role":
		v, ok := s.plainString()
		c.Role = intern(v, RoleAdmin)
		return ok
	case "created":
		v, ok := s.integer()
		c.Created = v
		return ok
	case "exp":
		return s.date(&c.ExpiresAt, &c.dates[0])
	case "nbf":
		return s.date(&c.NotBefore, &c.dates[1])
	case "iat":
		return s.date(&c.IssuedAt, &c.dates[2])
	}
	return false
}

// intern is v as a string, without allocating when it is common.
func intern(v []byte, common string) string {
	if string(v) == common {
		return common
	}
	return string(v)
}

// claimScanner reads the tokens of a flat JSON object from b.
type claimScanner struct {
	b []byte
	i int
}

func (s *claimScanner) space() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

// byte reads c after any white space.
func (s *claimScanner) byte(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// end says whether only white space is left.
func (s *claimScanner) end() bool {
	s.space()
	return s.i == len(s.b)
}

// plainString reads a string of printable ASCII without escapes, the
// only strings encoding/json decodes to their bytes as they are.
func (s *claimScanner) plainString() ([]byte, bool) {
	if !s.byte('"') {
		return nil, false
	}
	start := s.i
	for ; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

// integer reads a JSON number that is an integer without fraction or
// exponent and fits an int64.
func (s *claimScanner) integer() (int64, bool) {
	s.space()
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	digits := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	if s.i == digits || (s.b[digits] == '0' && s.i > digits+1) {
		return 0, false // no digit, or a leading zero
	}
	if s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		return 0, false
	}
	v, err := strconv.ParseInt(string(s.b[start:s.i]), 10, 64)
	return v, err == nil
}

// maxExactSeconds bounds the integer dates read here: jwt.NumericDate
// reads a date as a float64, exact up to 2^53.
const maxExactSeconds = 1 << 53

// date reads an integer NumericDate, as jwt.NumericDate would, into
// *into, and points *d to it.
func (s *claimScanner) date(d **jwt.NumericDate, into *jwt.NumericDate) bool {
	v, ok := s.integer()
	if !ok || v > maxExactSeconds || v < -maxExactSeconds {
		return false
	}
	*into = jwt.NumericDate{Time: time.Unix(v, 0)}
	*d = into
	return true
}
