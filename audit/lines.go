package audit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"unicode"
	"unicode/utf8"
)

// This file owns the line rules every JSON-lines file the audit reads
// shares (the export, the checkpoints file, the results file, an eligible
// list; docs/audit.md, "The file"): a line ends at a newline byte (0x0A),
// which is not part of it; it holds at most MaxLine bytes; ASCII space,
// tab and carriage return around it are dropped, and a line of nothing
// else is blank and skipped; any other white space (a no-break space, a
// byte order mark, a form feed) around it is refused, so that every
// reader drops the same bytes.

// MaxLine is the most bytes a line may hold, its newline not counted
// (white space around it and a carriage return counted): a checkpoint with
// witnesses' cosignatures or a results line fits many times over.
const MaxLine = 1 << 20

// EachLine calls fn with each non-blank line of r, without the white
// space around it, and its number (from 1, blank lines counted). It stops
// at fn's first error, and refuses a line longer than MaxLine or one
// surrounded by white space other than space, tab and carriage return;
// file names the file in those errors ("export": "export line 3 ...").
func EachLine(r io.Reader, file string, fn func(line []byte, n int) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxLine+1) // the line and its newline
	sc.Split(splitNewline)
	n := 0
	for sc.Scan() {
		n++
		raw := sc.Bytes()
		if len(raw) > MaxLine {
			return fmt.Errorf("%s line %d is longer than %d bytes (1 MiB, its newline not counted)", file, n, MaxLine)
		}
		line := bytes.Trim(raw, " \t\r")
		if len(line) == 0 {
			continue
		}
		if err := otherSpace(line); err != nil {
			return fmt.Errorf("%s line %d %v: only space, tab and carriage return may surround a line; remove it", file, n, err)
		}
		if err := fn(line, n); err != nil {
			return err
		}
	}
	if errors.Is(sc.Err(), bufio.ErrTooLong) {
		return fmt.Errorf("%s line %d is longer than %d bytes (1 MiB, its newline not counted)", file, n+1, MaxLine)
	}
	return sc.Err()
}

// splitNewline is bufio.ScanLines without its dropping of a carriage
// return: the line is every byte up to the newline.
func splitNewline(data []byte, atEOF bool) (advance int, token []byte, err error) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return i + 1, data[:i], nil
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// otherSpace says which white space, if any, begins or ends line, whose
// space, tab and carriage return are already dropped.
func otherSpace(line []byte) error {
	if r, _ := utf8.DecodeRune(line); unicode.IsSpace(r) || r == '\uFEFF' {
		return fmt.Errorf("begins with %U", r)
	}
	if r, _ := utf8.DecodeLastRune(line); unicode.IsSpace(r) || r == '\uFEFF' {
		return fmt.Errorf("ends with %U", r)
	}
	return nil
}
