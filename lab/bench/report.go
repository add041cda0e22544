package bench

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Table is a report's Markdown table: a header and rows of cells.
type Table struct {
	Header []string
	Rows   [][]string
}

// Add appends a row of cells.
func (t *Table) Add(cells ...string) { t.Rows = append(t.Rows, cells) }

// Markdown renders the table with a trailing newline.
func (t *Table) Markdown() string {
	var b strings.Builder
	row := func(cells []string) {
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	row(t.Header)
	sep := make([]string, len(t.Header))
	for i := range sep {
		sep[i] = "---"
	}
	b.WriteString("|" + strings.Join(sep, "|") + "|\n")
	for _, r := range t.Rows {
		row(r)
	}
	return b.String()
}

// WriteTo writes the Markdown table to w.
func (t *Table) WriteTo(w io.Writer) (int64, error) {
	n, err := io.WriteString(w, t.Markdown())
	return int64(n), err
}

// Ms formats d as milliseconds with two decimals ("4.99 ms").
func Ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

// ErrWriter keeps the first error of W and writes nothing after it, so a
// report written in many Fprintf calls returns one error at its end.
type ErrWriter struct {
	W   io.Writer
	Err error
}

func (e *ErrWriter) Write(p []byte) (int, error) {
	if e.Err != nil {
		return 0, e.Err
	}
	n, err := e.W.Write(p)
	e.Err = err
	return n, err
}
