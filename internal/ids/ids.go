// Package ids holds the one rule every id in tally follows: polls,
// candidates, principals and client event ids are 1-64 characters of
// [A-Za-z0-9_-].
package ids

// MaxLen is the longest id.
const MaxLen = 64

// Valid reports whether s is a valid id.
func Valid(s string) bool {
	if len(s) < 1 || len(s) > MaxLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
