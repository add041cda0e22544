package cli

import "io"

// report is what chaos, inspect and status print.
type report interface {
	WriteJSON(io.Writer) error
	WriteText(io.Writer) error
}

// writeReport prints rep as JSON (--json) or as text for a person.
func WriteReport(w io.Writer, rep report, asJSON bool) error {
	if asJSON {
		return rep.WriteJSON(w)
	}
	return rep.WriteText(w)
}
