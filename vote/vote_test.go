package vote

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var rule = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func TestValidID(t *testing.T) {
	for _, s := range []string{"", "a", "A-b_9", strings.Repeat("x", 64), strings.Repeat("x", 65), "a b", "é", "a/b", "a.b", "a\x00"} {
		if ValidID(s) != rule.MatchString(s) {
			t.Errorf("ValidID(%q) = %v, the rule says %v", s, ValidID(s), rule.MatchString(s))
		}
	}
}

// Every byte value alone, and the ends of each range of allowed
// characters ('a' and 'z', 'A' and 'Z', '0' and '9') with their outside
// neighbours, as ValidID and IDChars see them.
func TestIDCharsEachByte(t *testing.T) {
	for c := range 256 {
		s := string([]byte{byte(c)})
		want := rule.MatchString(s)
		if ValidID(s) != want || IDChars(s) != want || IDChars([]byte(s)) != want {
			t.Errorf("byte %#x (%q): ValidID %v, IDChars %v, want %v", c, s, ValidID(s), IDChars(s), want)
		}
	}
	for _, s := range []string{"az", "AZ", "09", "a-z_A-Z0-9"} {
		if !ValidID(s) {
			t.Errorf("ValidID(%q) = false", s)
		}
	}
}

func TestFingerprint(t *testing.T) {
	want := sha256.Sum256([]byte("lunch\x00pizza"))
	if Fingerprint("lunch", "pizza") != want {
		t.Fatal("Fingerprint is not SHA-256 of poll NUL candidate")
	}
	if FingerprintHex("lunch", "pizza") != hex.EncodeToString(want[:]) {
		t.Fatal("FingerprintHex is not the lowercase hex of Fingerprint")
	}
	// A payload longer than Fingerprint's buffer on the stack.
	long := `{"` + strings.Repeat("a", MaxIDLen) + `":"abstain","` + strings.Repeat("b", MaxIDLen) + `":"abstain"}`
	if Fingerprint("lunch", long) != sha256.Sum256([]byte("lunch\x00"+long)) {
		t.Fatal("Fingerprint of a long ballot is not SHA-256 of poll NUL ballot")
	}
	// The separator keeps ("ab", "c") and ("a", "bc") apart.
	if Fingerprint("ab", "c") == Fingerprint("a", "bc") {
		t.Fatal("two payloads share a fingerprint")
	}
}

func FuzzValidID(f *testing.F) {
	f.Add("abc")
	f.Fuzz(func(t *testing.T, s string) {
		if ValidID(s) != rule.MatchString(s) {
			t.Fatalf("ValidID(%q) = %v, the rule says %v", s, ValidID(s), rule.MatchString(s))
		}
	})
}

func TestLanes(t *testing.T) {
	l := NewLanes(4)
	seen := map[int]bool{}
	for i := range 1000 {
		p := "p" + strconv.Itoa(i)
		w := l.Of(p)
		if w < 0 || w >= 4 {
			t.Fatalf("Of(%q) = %d, want 0-3", p, w)
		}
		if l.Of(p) != w {
			t.Fatalf("Of(%q) changed between calls", p)
		}
		seen[w] = true
	}
	if len(seen) != 4 {
		t.Fatalf("1000 principals reached %d of 4 lanes", len(seen))
	}
	if NewLanes(0).Of("x") != 0 || NewLanes(1).Of("y") != 0 {
		t.Fatal("one lane (or zero, taken as one) must own every principal")
	}
}
