package ids

import (
	"regexp"
	"strings"
	"testing"
)

var rule = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func TestValid(t *testing.T) {
	for _, s := range []string{"", "a", "A-b_9", strings.Repeat("x", 64), strings.Repeat("x", 65), "a b", "é", "a/b", "a.b", "a\x00"} {
		if Valid(s) != rule.MatchString(s) {
			t.Errorf("Valid(%q) = %v, the rule says %v", s, Valid(s), rule.MatchString(s))
		}
	}
}

func FuzzValid(f *testing.F) {
	f.Add("abc")
	f.Fuzz(func(t *testing.T, s string) {
		if Valid(s) != rule.MatchString(s) {
			t.Fatalf("Valid(%q) = %v, the rule says %v", s, Valid(s), rule.MatchString(s))
		}
	})
}
