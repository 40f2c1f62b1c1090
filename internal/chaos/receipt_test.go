package chaos_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"tally/internal/pause"
	"tally/internal/testenv"
	"tally/ledger"
)

// A voter's receipt, end to end: the projector signs the poll's log with
// its key, intake hands the receipt out with the vote's status, and tally
// audit receipt checks it offline against the verifier key alone; later,
// against a newer checkpoint and the consistency proof intake serves. A
// receipt changed in one field, or checked with another key, is refused.
func TestReceiptEndToEnd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "log.key")
	vkey := strings.TrimSpace(runTally(t, 0, "", "log", "key", "generate", "--name", "tally.test", "--out", keyFile))
	c := newCluster(t, clusterOptions{intakes: 1, projectors: 1,
		projectorArgs: []string{"--log-key", keyFile, "--checkpoint-interval", "100ms"}})
	ctx := context.Background()
	if err := c.store.CreatePoll(ctx, ledger.Poll{ID: "lunch", Title: "Lunch?", OpensAt: time.Unix(0, 0), Choices: []string{"pizza", "sushi"}}); err != nil {
		t.Fatal(err)
	}
	base := c.intakeURLs()[0]
	voter := newVoter(t, c, base)
	others := newVoter(t, c, base)
	voter.waitPoll("lunch")

	voter.vote("mine", "sushi")
	status := voter.waitReceipt("mine")
	receipt := filepath.Join(dir, "status.json")
	write(t, receipt, status)
	out := runTally(t, 0, "", "audit", "receipt", receipt, "--key", vkey)
	if !strings.Contains(out, "lunch") {
		t.Errorf("audit receipt said %q; want it to name the poll", out)
	}
	runTally(t, 0, string(status), "audit", "receipt", "-", "--key", vkey) // the status on stdin, as make run prints it

	// Others vote; a later checkpoint must still hold the receipt's tree.
	var first struct {
		Receipt struct {
			TreeSize int64 `json:"tree_size"`
		} `json:"receipt"`
	}
	if err := json.Unmarshal(status, &first); err != nil || first.Receipt.TreeSize < 1 {
		t.Fatalf("status %s: %v", status, err)
	}
	for i := range 5 {
		others.as(fmt.Sprintf("other-%d", i)).vote("v", "pizza")
	}
	later, size := voter.waitCheckpoint("lunch", first.Receipt.TreeSize+5)
	write(t, filepath.Join(dir, "later.txt"), later)
	consistency := voter.get(fmt.Sprintf("/v1/polls/lunch/consistency?from=%d&to=%d", first.Receipt.TreeSize, size))
	write(t, filepath.Join(dir, "consistency.json"), consistency)
	runTally(t, 0, "", "audit", "receipt", receipt, "--key", vkey,
		"--checkpoint", filepath.Join(dir, "later.txt"), "--consistency", filepath.Join(dir, "consistency.json"))

	// Refusals: the receipt claims another choice; another key.
	forged := bytes.ReplaceAll(status, []byte(`"candidate_id":"sushi"`), []byte(`"candidate_id":"pizza"`))
	if bytes.Equal(forged, status) {
		t.Fatalf("status %s does not hold the candidate as expected", status)
	}
	write(t, filepath.Join(dir, "forged.json"), forged)
	runTally(t, 1, "", "audit", "receipt", filepath.Join(dir, "forged.json"), "--key", vkey)
	otherKey := strings.TrimSpace(runTally(t, 0, "", "log", "key", "generate", "--name", "tally.test", "--out", filepath.Join(dir, "other.key")))
	runTally(t, 1, "", "audit", "receipt", receipt, "--key", otherKey)
}

// runTally runs the tally binary with stdin and wants exit code want; it
// returns standard output.
func runTally(t *testing.T, want int, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, tallyBin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("tally %s: %v", strings.Join(args, " "), err)
	}
	if code != want {
		t.Fatalf("tally %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, want, out.String(), errOut.String())
	}
	return out.String()
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// voter is a principal casting votes through one intake.
type voter struct {
	t      *testing.T
	c      *cluster
	base   string
	token  string
	client *http.Client
}

func newVoter(t *testing.T, c *cluster, base string) *voter {
	t.Helper()
	_, token, err := c.signed(context.Background(), "voter")
	if err != nil {
		t.Fatal(err)
	}
	return &voter{t: t, c: c, base: base, token: token, client: &http.Client{Timeout: 5 * time.Second}}
}

// waitPoll waits until intake knows poll id (it answers its results, not
// 404): intake knows a poll once it heard the NOTIFY of its creation.
func (v *voter) waitPoll(id string) {
	v.t.Helper()
	testenv.Eventually(v.t, 10*time.Second, "intake to know poll "+id, func() bool {
		code, _ := v.do(http.MethodGet, "/v1/polls/"+id+"/results", nil)
		return code != http.StatusNotFound
	})
}

// as is a fresh principal voting through the same intake.
func (v *voter) as(name string) *voter {
	v.t.Helper()
	_, token, err := v.c.signed(context.Background(), name)
	if err != nil {
		v.t.Fatal(err)
	}
	return &voter{t: v.t, c: v.c, base: v.base, token: token, client: v.client}
}

// do sends one request as v. A read refused 429 is sent again after its
// Retry-After, up to 10 times: the waits below poll every 10ms, past the
// principal's read limit (10 a second), and a read after them would find
// the limit spent.
func (v *voter) do(method, path string, body io.Reader) (int, []byte) {
	v.t.Helper()
	for range 10 {
		code, b, wait := v.once(method, path, body)
		if code != http.StatusTooManyRequests || body != nil {
			return code, b
		}
		pause.For(v.t.Context(), wait)
	}
	code, b, _ := v.once(method, path, body)
	return code, b
}

// once sends one request as v, and returns its answer and Retry-After.
func (v *voter) once(method, path string, body io.Reader) (int, []byte, time.Duration) {
	v.t.Helper()
	req, err := http.NewRequest(method, v.base+path, body)
	if err != nil {
		v.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+v.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := v.client.Do(req)
	if err != nil {
		v.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		v.t.Fatal(err)
	}
	wait := time.Second
	if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
		wait = time.Duration(n) * time.Second
	}
	return resp.StatusCode, b, wait
}

func (v *voter) vote(eventID, candidate string) {
	v.t.Helper()
	code, b := v.do(http.MethodPost, "/v1/votes", strings.NewReader(fmt.Sprintf(`{"event_id":%q,"poll_id":"lunch","candidate_id":%q}`, eventID, candidate)))
	if code != http.StatusAccepted {
		v.t.Fatalf("vote %s: %d %s", eventID, code, b)
	}
}

func (v *voter) get(path string) []byte {
	v.t.Helper()
	code, b := v.do(http.MethodGet, path, nil)
	if code != http.StatusOK {
		v.t.Fatalf("GET %s: %d %s", path, code, b)
	}
	return b
}

// waitReceipt asks for the vote's status until it carries a receipt (10s
// at most) and returns it.
func (v *voter) waitReceipt(eventID string) []byte {
	v.t.Helper()
	var b []byte
	testenv.Eventually(v.t, 10*time.Second, "a receipt for "+eventID, func() error {
		var code int
		code, b = v.do(http.MethodGet, "/v1/votes/"+eventID, nil)
		if code == http.StatusOK && bytes.Contains(b, []byte(`"receipt"`)) && !bytes.Contains(b, []byte(`"receipt":null`)) {
			return nil
		}
		return fmt.Errorf("answer %d %s", code, b)
	})
	return b
}

// waitCheckpoint fetches poll's latest checkpoint until its tree holds at
// least size leaves (10s at most); it returns the note and its size.
func (v *voter) waitCheckpoint(poll string, size int64) ([]byte, int64) {
	v.t.Helper()
	var b []byte
	var got int64
	testenv.Eventually(v.t, 10*time.Second, fmt.Sprintf("a checkpoint of %s of size %d", poll, size), func() error {
		var code int
		code, b = v.do(http.MethodGet, "/v1/polls/"+poll+"/checkpoint", nil)
		if lines := strings.SplitN(string(b), "\n", 3); code == http.StatusOK && len(lines) == 3 {
			fmt.Sscan(lines[1], &got)
			if got >= size {
				return nil
			}
		}
		return fmt.Errorf("answer %d %s", code, b)
	})
	return b, got
}
