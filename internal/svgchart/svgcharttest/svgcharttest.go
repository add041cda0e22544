// Package svgcharttest reads back what package svgchart drew, for tests: the
// SVG must parse as XML, and its marks (bars, line points) are counted by
// class and series.
package svgcharttest

import (
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
)

// Mark is one element with a class attribute.
type Mark struct {
	Element, Class, Series string
}

// Doc is a parsed chart.
type Doc struct {
	Root  string // the root element's name ("svg")
	Marks []Mark
	Text  string // all character data, for labels and titles
}

// Count is how many marks have class, and series when it is not empty.
func (d Doc) Count(class, series string) int {
	n := 0
	for _, m := range d.Marks {
		if m.Class == class && (series == "" || m.Series == series) {
			n++
		}
	}
	return n
}

// Parse decodes svg as XML, failing t when it is not well-formed or not one
// <svg> element.
func Parse(t testing.TB, svg string) Doc {
	t.Helper()
	var d Doc
	var text strings.Builder
	dec := xml.NewDecoder(strings.NewReader(svg))
	depth := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("chart is not well-formed XML: %v\n%s", err, svg)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				if d.Root != "" {
					t.Fatalf("chart has a second root element <%s>", e.Name.Local)
				}
				d.Root = e.Name.Local
			}
			depth++
			m := Mark{Element: e.Name.Local}
			for _, a := range e.Attr {
				switch a.Name.Local {
				case "class":
					m.Class = a.Value
				case "data-series":
					m.Series = a.Value
				}
			}
			if m.Class != "" {
				d.Marks = append(d.Marks, m)
			}
		case xml.EndElement:
			depth--
		case xml.CharData:
			text.Write(e)
			text.WriteByte(' ')
		}
	}
	if d.Root != "svg" {
		t.Fatalf("chart's root element is <%s>, want <svg>", d.Root)
	}
	d.Text = text.String()
	return d
}
