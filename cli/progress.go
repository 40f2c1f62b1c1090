package cli

import (
	"context"
	"io"
	"os"
	"time"

	"github.com/cheggaaa/pb/v3"
	"github.com/mattn/go-isatty"
	ucli "github.com/urfave/cli/v2"
)

// The long commands (import, export, rebuild) show how far they have got
// on one line of standard error, redrawn in place, for a person watching
// a terminal: a count, a rate, and the time left where the total is
// known. Nothing of it goes to standard output, and the line is wiped
// before the command prints its summary, on an error, and at the first
// Ctrl-C, so a summary or an error message always starts on a clean line.
//
// github.com/cheggaaa/pb/v3 draws it: Finish waits for its drawing
// goroutine and wipes the line (CleanOnFinish), so nothing is written
// after stop returns, its counter is atomic, and its rate is a moving
// average. schollz/progressbar's spinner goroutine outlives Exit, and
// vbauerster/mpb is built for many bars at once.

// progressRefresh is how often the line is redrawn.
const progressRefresh = 200 * time.Millisecond

// progressWidth bounds the line on a wide terminal.
const progressWidth = 100

// quietFlag is --quiet of one command; like tally loadtest --quiet it is
// also read from TALLY_<COMMAND>_QUIET.
func quietFlag(command string) *ucli.BoolFlag {
	return &ucli.BoolFlag{Name: "quiet", EnvVars: []string{"TALLY_" + command + "_QUIET"},
		Usage: "no progress line on standard error (it is drawn only when standard error is a terminal)"}
}

// showProgress reports whether c's command draws its progress: standard
// error is a terminal and --quiet was not given.
func showProgress(c *ucli.Context) bool {
	return !c.Bool("quiet") && isTTY(c.App.ErrWriter)
}

// isTTY reports whether w is a terminal. isTerminal (app.go) asks only for
// a character device, which /dev/null also is; a line redrawn with \r
// needs a terminal.
func isTTY(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// regularSize is the size of r when it is a regular file, the total of a
// line that counts its bytes; 0 (not known) for a pipe or a terminal.
func regularSize(r io.Reader) int64 {
	f, ok := r.(*os.File)
	if !ok {
		return 0
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return 0
	}
	return st.Size()
}

// meter says what a progress line counts.
type meter struct {
	label string // what is under way, first on the line
	unit  string // what is counted, plural ("events"); empty: bytes
	total int64  // how many there will be; 0 when not known
	spin  bool   // nothing can be counted: a spinner and the time so far
}

// template is the line of m. Where the total is known and not yet
// reached it shows the count of the total, a bar, the percentage, the
// rate and the time left; otherwise (no total, or an estimate that ran
// out) the count, the rate and the time so far. The choice is made at
// each redraw, so the template never changes while the bar draws.
func (m meter) template() string {
	label := `{{string . "label"}} `
	if m.spin {
		return label + `{{cycle . "|" "/" "-" "\\"}} {{etime .}}`
	}
	unit, rate := "", `{{speed . "%s/s" "?/s"}}`
	if m.unit != "" {
		unit = " " + m.unit
		rate = `{{speed . "%s ` + m.unit + `/s" "? ` + m.unit + `/s"}}`
	}
	return label + `{{if lt .Value .Total}}` +
		`{{counters . "%s / %s"}}` + unit + ` {{bar . "[" "=" ">" " " "]"}} {{percent . "%.0f%%"}} ` + rate + ` {{rtime . "%s left" "%s" "? left"}}` +
		`{{else}}` +
		`{{counters . "%[1]s" "%[1]s"}}` + unit + ` ` + rate + ` {{etime .}}` +
		`{{end}}`
}

// progress is the progress line of one command. Its zero value (and one
// made off) draws nothing, so a command calls it the same way whether or
// not a person watches.
type progress struct {
	bar     *pb.ProgressBar // nil: nothing is drawn
	unwatch func() bool     // stops the wipe at the end of the context
}

// startProgress starts the progress line of c's command on standard error
// when showProgress says so.
func startProgress(c *ucli.Context, m meter) *progress {
	return newProgress(c.Context, c.App.ErrWriter, showProgress(c), m, progressRefresh)
}

// newProgress draws m on w every refresh when on, as on a terminal
// whatever w is (tests draw into a buffer); off, it draws nothing. The
// line is wiped when ctx ends, as at Ctrl-C, without waiting for the
// command to notice.
func newProgress(ctx context.Context, w io.Writer, on bool, m meter, refresh time.Duration) *progress {
	if !on {
		return &progress{}
	}
	bar := pb.New64(m.total)
	bar.Set(pb.Terminal, true) // before SetWriter, which reads it: \r, and the line padded to its width
	bar.Set(pb.CleanOnFinish, true)
	bar.Set(pb.Bytes, m.unit == "" && !m.spin)
	bar.Set("label", m.label)
	bar.SetWriter(w)
	bar.SetTemplateString(m.template())
	bar.SetRefreshRate(refresh)
	bar.SetMaxWidth(progressWidth)
	p := &progress{bar: bar.Start()}
	p.unwatch = context.AfterFunc(ctx, func() { p.bar.Finish() })
	return p
}

// add counts n more.
func (p *progress) add(n int64) {
	if p.bar != nil {
		p.bar.Add64(n)
	}
}

// reader returns r counting the bytes read through it.
func (p *progress) reader(r io.Reader) io.Reader {
	if p.bar == nil {
		return r
	}
	return p.bar.NewProxyReader(r)
}

// describe changes what the line says is under way.
func (p *progress) describe(label string) {
	if p.bar != nil {
		p.bar.Set("label", label)
	}
}

// stop wipes the line and stops drawing: once it returns, nothing more
// is written. It may be called more than once.
func (p *progress) stop() {
	if p.bar == nil {
		return
	}
	p.unwatch()
	p.bar.Finish() // waits for a Finish already under way at the end of the context
}
