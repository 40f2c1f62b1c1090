package audit

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// This file owns the one rule for free text read from JSON (a poll's
// title): its bytes must be exactly what every JSON reader decodes. A byte
// that is not UTF-8, or a \u escape of a lone UTF-16 surrogate ("\ud800"
// without its low half), is replaced by U+FFFD by encoding/json and many
// others, silently, and refused by some: the leaf's bytes, and so the
// root, would depend on the reader. Such text is refused instead, at
// creation (POST /v1/polls, tally poll create) and in the export.

// CheckJSONString checks raw, a JSON string as it is written (its quotes
// included, already known to be valid JSON), and says what is wrong with
// it: a byte that is not UTF-8, or an escaped lone surrogate.
func CheckJSONString(raw []byte) error {
	for i := 0; i < len(raw); {
		r, size := utf8.DecodeRune(raw[i:])
		if r == utf8.RuneError && size <= 1 {
			return fmt.Errorf("holds byte 0x%02x at byte %d of its JSON text, which is not UTF-8", raw[i], i)
		}
		if raw[i] != '\\' {
			i += size
			continue
		}
		if i+1 < len(raw) && raw[i+1] != 'u' {
			i += 2
			continue
		}
		hi, ok := escapedUnit(raw, i)
		switch {
		case !ok:
			i += 2
		case hi >= 0xD800 && hi < 0xDC00:
			if lo, ok := escapedUnit(raw, i+6); ok && lo >= 0xDC00 && lo < 0xE000 {
				i += 12
				continue
			}
			return fmt.Errorf("escapes a lone surrogate, \\u%04x without the low half that makes it a character", hi)
		case hi >= 0xDC00 && hi < 0xE000:
			return fmt.Errorf("escapes a lone surrogate, \\u%04x without the high half before it", hi)
		default:
			i += 6
		}
	}
	return nil
}

// escapedUnit is the UTF-16 unit of the \uXXXX escape at raw[i:], if
// there is one.
func escapedUnit(raw []byte, i int) (uint16, bool) {
	if i+6 > len(raw) || raw[i] != '\\' || raw[i+1] != 'u' {
		return 0, false
	}
	n, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 16)
	return uint16(n), err == nil
}
