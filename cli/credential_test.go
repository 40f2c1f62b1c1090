package cli

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"tally/credential"
	"tally/internal/testenv"
	"tally/ledger"
)

// TestCredentialKeyRetire: retire refuses an id not of a key id's form,
// and one of that form that is none of the deployment's keys', retiring
// nothing, with a message that says what to give; it retires one of them,
// which list and show then report retired while the other stays active.
func TestCredentialKeyRetire(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	oldFile, newFile := credentialKeyFile(t), credentialKeyFile(t)
	oldKey, err := credential.ReadKeyFile(oldFile)
	if err != nil {
		t.Fatal(err)
	}
	newKey, err := credential.ReadKeyFile(newFile)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"--credential-key", oldFile, "--credential-key", newFile}
	retire := func(args ...string) run {
		return tally(t, db.URL, append([]string{"credential", "key", "retire"}, args...)...)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{append([]string{"k-doesnotexist00"}, keys...), `"k-doesnotexist00" is not a credential key id: a key id is k- and 16 lower-case hex digits`},
		{append([]string{"K-0123456789ABCDEF"}, keys...), "is not a credential key id"},
		{append([]string{"k-0123456789abcde"}, keys...), "is not a credential key id"},
		{append([]string{"k-0123456789abcdef"}, keys...), "k-0123456789abcdef is not the id of any key of --credential-key"},
		{[]string{oldKey.ID}, "give the deployment's credential key files with --credential-key FILE"},
		{keys, "give the KEY_ID to retire"},
	} {
		if r := retire(c.args...); r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("retire %v: %+v; want exit 2 saying %q", c.args, r, c.want)
		}
	}
	store, err := ledger.New(db.Pool, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if retired, err := store.RetiredCredentialKeys(context.Background()); err != nil || len(retired) != 0 {
		t.Fatalf("after refused retirements the retired keys are %v (%v), want none", retired, err)
	}

	if r := retire(append([]string{oldKey.ID}, keys...)...); r.code != 0 || !strings.Contains(r.stderr, "retired credential key "+oldKey.ID) {
		t.Fatalf("retire %s: %+v", oldKey.ID, r)
	}
	r := tally(t, db.URL, append([]string{"credential", "key", "list"}, keys...)...)
	for _, want := range []string{
		`(?m)^` + oldKey.ID + `\s+retired\s+\S+Z\s+` + regexp.QuoteMeta(oldFile) + `\s*$`,
		`(?m)^` + newKey.ID + `\s+active\s+-?\s*` + regexp.QuoteMeta(newFile) + `\s*$`,
	} {
		if r.code != 0 || !regexp.MustCompile(want).MatchString(r.stdout) {
			t.Fatalf("key list: %+v; want a line matching %s", r, want)
		}
	}
	r = tally(t, db.URL, "credential", "key", "show", newFile, "--format", "json")
	var shown []keyJSON
	if err := json.Unmarshal([]byte(r.stdout), &shown); err != nil || r.code != 0 {
		t.Fatalf("key show --format json: %+v (%v)", r, err)
	}
	if len(shown) != 1 || shown[0].ID != newKey.ID || shown[0].State != keyActive || shown[0].RetiredAt != nil {
		t.Fatalf("key show %s: %+v, want %s active", newFile, shown, newKey.ID)
	}
	if r := tally(t, db.URL, "credential", "key", "list"); r.code != 2 || !strings.Contains(r.stderr, "--credential-key FILE") {
		t.Fatalf("key list without keys: %+v", r)
	}
}
