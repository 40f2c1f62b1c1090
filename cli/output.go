package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v2"
)

// formatFlag is --format, a new one for each command (see commonFlags).
func formatFlag() *ucli.StringFlag {
	return &ucli.StringFlag{Name: "format", Value: "table", Usage: "output format: table or json"}
}

// outputJSON reports whether --format asks for JSON.
func outputJSON(c *ucli.Context) (bool, error) {
	switch f := c.String("format"); f {
	case "table":
		return false, nil
	case "json":
		return true, nil
	default:
		return false, fmt.Errorf("--format %q: use table or json", f)
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table prints aligned columns for a person to read.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cols ...string) { io.WriteString(t.tw, strings.Join(cols, "\t")+"\n") }

func (t *table) flush() error { return t.tw.Flush() }

// fmtTimePtr is an optional time for a table cell: RFC 3339 in UTC, or "-".
func fmtTimePtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
