package loadtest

import (
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := Config{Targets: []string{"http://127.0.0.1:8080"}, Votes: 100}
	tests := []struct {
		name   string
		change func(*Config)
		want   string // "" when valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"duration instead", func(c *Config) { c.Votes, c.Duration = 0, time.Minute }, ""},
		{"no target", func(c *Config) { c.Targets = nil }, "--target"},
		{"bad target", func(c *Config) { c.Targets = []string{"127.0.0.1:8080"} }, "not an http"},
		{"neither", func(c *Config) { c.Votes = 0 }, "--votes N or --duration D"},
		{"both", func(c *Config) { c.Duration = time.Second }, "not both"},
		{"too many votes", func(c *Config) { c.Votes = MaxVotes + 1; c.Principals = MaxPrincipals }, "votes must be"},
		{"too long", func(c *Config) { c.Votes, c.Duration = 0, 2*time.Hour }, "duration must be"},
		{"negative rate", func(c *Config) { c.Rate = -1 }, "rate must be"},
		{"share above 1", func(c *Config) { c.RetryShare = 1.5 }, "retry share"},
		{"shares add up", func(c *Config) { c.RetryShare, c.SecondResponseShare = 0.6, 0.6 }, "add up to"},
		{"one choice", func(c *Config) { c.PollChoices = 1 }, "poll choices"},
		{"too many polls", func(c *Config) { c.Votes, c.Principals = 1_000_000, 10 }, "raise the principals"},
		{"bad prefix", func(c *Config) { c.PollPrefix = "a b" }, "poll prefix"},
	}
	for _, tt := range tests {
		c := ok
		tt.change(&c)
		err := c.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v, want valid", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want an error with %q", tt.name, err, tt.want)
		}
	}
}

func TestKeyIDRoundTrip(t *testing.T) {
	t.Parallel()
	for _, i := range []uint32{0, 1, 9, 10, 123456, 1<<32 - 1} {
		if got, ok := parseKeyID(keyID(i)); !ok || got != i {
			t.Errorf("parseKeyID(keyID(%d)) = %d, %v", i, got, ok)
		}
	}
	for _, s := range []string{"", "k", "k01", "x1", "k-1", "k4294967296", "k1a"} {
		if _, ok := parseKeyID(s); ok {
			t.Errorf("parseKeyID(%q) accepted", s)
		}
	}
}
