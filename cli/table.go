package cli

import (
	"io"
	"strings"
	"text/tabwriter"
)

// table prints aligned columns for a person to read.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cols ...string) { io.WriteString(t.tw, strings.Join(cols, "\t")+"\n") }

func (t *table) flush() error { return t.tw.Flush() }
