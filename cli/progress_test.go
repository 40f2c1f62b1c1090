package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"tally/internal/testenv"
)

// tallyFiles runs the command line as tally does, with standard input,
// output and error on files: a regular file is not a terminal, so no
// progress is drawn.
func tallyFiles(t *testing.T, dbURL string, stdin io.Reader, args ...string) run {
	t.Helper()
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	dir := t.TempDir()
	stdout, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	defer stdout.Close()
	stderr, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	full := append([]string{"tally"}, args...)
	full = append(full, "--database-url", dbURL, "--log-format", "text")
	runMu.Lock()
	code := Run(context.Background(), full, stdin, stdout, stderr)
	runMu.Unlock()
	out, err := os.ReadFile(stdout.Name())
	if err != nil {
		t.Fatal(err)
	}
	errOut, err := os.ReadFile(stderr.Name())
	if err != nil {
		t.Fatal(err)
	}
	return run{code, string(out), string(errOut)}
}

// Off a terminal, import, export and rebuild print what they always did,
// with or without --quiet, and nothing else: no progress line, on either
// stream.
func TestLongCommandsQuietOffTerminal(t *testing.T) {
	t.Parallel()
	db := testenv.Postgres(t)
	if r := tally(t, db.URL, "poll", "create", "p", "--title", "T", "--choice", "x", "--choice", "y"); r.code != 0 {
		t.Fatalf("poll create: %+v", r)
	}
	file := filepath.Join(t.TempDir(), "events.jsonl")
	lines := `{"event_id":"e1","poll_id":"p","candidate_id":"x","principal_id":"u1"}
{"event_id":"e2","poll_id":"p","candidate_id":"y","principal_id":"u2"}
{"event_id":"e3","poll_id":"p","candidate_id":"x","principal_id":"u3"}
`
	if err := os.WriteFile(file, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	noProgress := func(name string, r run) {
		t.Helper()
		for _, s := range []string{r.stdout, r.stderr} {
			if strings.Contains(s, "\r") || strings.Contains(s, "/s") {
				t.Fatalf("%s drew progress off a terminal: %+v", name, r)
			}
		}
	}

	r := tallyFiles(t, db.URL, nil, "import", file)
	noProgress("import", r)
	if r.code != 0 || r.stderr != "" || !regexp.MustCompile(`(?m)^recorded\s+3$`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^total\s+3$`).MatchString(r.stdout) {
		t.Fatalf("import: %+v", r)
	}
	stdin, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	r = tallyFiles(t, db.URL, stdin, "import", "-", "--quiet")
	noProgress("import - --quiet", r)
	if r.code != 0 || r.stderr != "" || !regexp.MustCompile(`(?m)^duplicate\s+3$`).MatchString(r.stdout) {
		t.Fatalf("import - --quiet: %+v", r)
	}

	for _, args := range [][]string{{"export"}, {"export", "--poll", "p"}, {"rebuild"}, {"rebuild", "--apply"}} {
		loud := tallyFiles(t, db.URL, nil, args...)
		quiet := tallyFiles(t, db.URL, nil, append(args, "--quiet")...)
		name := strings.Join(args, " ")
		noProgress(name, loud)
		if loud != quiet {
			t.Fatalf("%s: --quiet changed the output:\n%+v\n%+v", name, loud, quiet)
		}
		if loud.code != 0 {
			t.Fatalf("%s: %+v", name, loud)
		}
		if args[0] == "export" && (loud.stderr != "exported 3 events and 1 definitions\n" || strings.Count(loud.stdout, "\n") != 4) {
			t.Fatalf("%s: %+v", name, loud)
		}
		if args[0] == "rebuild" && (loud.stderr != "" || !strings.Contains(loud.stdout, "OK: the projection equals the ledger (3 events, 2 tallies)\n")) {
			t.Fatalf("%s: %+v", name, loud)
		}
	}

	for _, cmd := range []string{"import", "export", "rebuild"} {
		r := tally(t, db.URL, cmd, "--help")
		env := "TALLY_" + strings.ToUpper(cmd) + "_QUIET"
		if r.code != 0 || !strings.Contains(r.stdout, "--quiet") || !strings.Contains(r.stdout, env) {
			t.Fatalf("tally %s --help does not name --quiet and %s: %+v", cmd, env, r)
		}
	}
}

// syncBuffer is a bytes.Buffer the drawing goroutine and the test can share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitDrawn waits until what was drawn matches re, and returns it.
func waitDrawn(t *testing.T, b *syncBuffer, re *regexp.Regexp) string {
	t.Helper()
	var s string
	testenv.Eventually(t, 5*time.Second, fmt.Sprintf("%s drawn", re), func() error {
		if s = b.String(); !re.MatchString(s) {
			return fmt.Errorf("drawn: %q", s)
		}
		return nil
	})
	return s
}

// wiped checks that the line was wiped last (blanks between two \r) and
// that nothing is drawn once stop has returned.
func wiped(t *testing.T, b *syncBuffer) {
	t.Helper()
	s := b.String()
	if !regexp.MustCompile(`\r *\r$`).MatchString(s) {
		t.Fatalf("the line was not wiped last: %q", s)
	}
	time.Sleep(50 * time.Millisecond)
	if after := b.String(); after != s {
		t.Fatalf("drawn after stop: %q", after[len(s):])
	}
}

// Forced on, the progress line counts, shows the rate (a moving average of
// what was counted since the first frame, sampled every half second), the
// time left where the total is known, and is wiped by stop or by the end
// of its context.
func TestProgressDraws(t *testing.T) {
	t.Parallel()
	const refresh = 10 * time.Millisecond

	t.Run("count without total", func(t *testing.T) {
		t.Parallel()
		var b syncBuffer
		p := newProgress(t.Context(), &b, true, meter{label: "export", unit: "events"}, refresh)
		waitDrawn(t, &b, regexp.MustCompile(`export 0 events \? events/s `))
		p.add(1500)
		s := waitDrawn(t, &b, regexp.MustCompile(`export 1500 events [0-9]+ events/s `))
		if strings.Contains(s, "left") || strings.Contains(s, "%") {
			t.Fatalf("a line with no total shows a time left or a percentage: %q", s)
		}
		p.stop()
		wiped(t, &b)
		p.stop() // twice is safe
	})

	t.Run("bytes of a total", func(t *testing.T) {
		t.Parallel()
		var b syncBuffer
		p := newProgress(t.Context(), &b, true, meter{label: "import", total: 10 << 20}, refresh)
		waitDrawn(t, &b, regexp.MustCompile(`import 0 B / 10\.00 MiB \[ *\] 0% \?/s \? left`))
		n, err := io.Copy(io.Discard, p.reader(bytes.NewReader(make([]byte, 1<<20))))
		if err != nil || n != 1<<20 {
			t.Fatalf("read %d bytes through the progress, err %v", n, err)
		}
		waitDrawn(t, &b, regexp.MustCompile(`import 1\.00 MiB / 10\.00 MiB \[=*> *\] 10% [0-9.]+ [KM]iB/s [0-9hms.]+ left`))
		p.stop()
		wiped(t, &b)
	})

	t.Run("estimate run out", func(t *testing.T) {
		t.Parallel()
		var b syncBuffer
		p := newProgress(t.Context(), &b, true, meter{label: "export", unit: "events", total: 10}, refresh)
		p.add(12)
		waitDrawn(t, &b, regexp.MustCompile(`export 12 events `))
		p.stop()
		for _, frame := range strings.Split(b.String(), "\r") {
			if strings.Contains(frame, "12") && (strings.Contains(frame, "/ 10") || strings.Contains(frame, "left")) {
				t.Fatalf("a count past its total shows the total: %q", frame)
			}
		}
	})

	t.Run("spinner", func(t *testing.T) {
		t.Parallel()
		var b syncBuffer
		p := newProgress(t.Context(), &b, true, meter{label: "rebuild", spin: true}, refresh)
		waitDrawn(t, &b, regexp.MustCompile(`rebuild [|/\\-] [0-9.]+m?s`))
		p.describe("rebuild: again")
		waitDrawn(t, &b, regexp.MustCompile(`rebuild: again [|/\\-] `))
		p.stop()
		wiped(t, &b)
	})

	t.Run("end of context", func(t *testing.T) {
		t.Parallel()
		var b syncBuffer
		ctx, cancel := context.WithCancel(t.Context())
		p := newProgress(ctx, &b, true, meter{label: "export", unit: "events"}, refresh)
		p.add(1)
		waitDrawn(t, &b, regexp.MustCompile(`export 1 events`))
		cancel() // as at Ctrl-C: wiped before the command notices
		waitDrawn(t, &b, regexp.MustCompile(`\r *\r$`))
		wiped(t, &b)
		p.stop()
		wiped(t, &b)
	})

	t.Run("off", func(t *testing.T) {
		t.Parallel()
		var b syncBuffer
		p := newProgress(t.Context(), &b, false, meter{label: "export", unit: "events"}, refresh)
		in := bytes.NewReader(nil)
		if p.reader(in) != io.Reader(in) {
			t.Fatal("off, reader wraps its reader")
		}
		p.add(5)
		p.describe("x")
		time.Sleep(3 * refresh)
		p.stop()
		if s := b.String(); s != "" {
			t.Fatalf("off, it drew %q", s)
		}
	})
}
