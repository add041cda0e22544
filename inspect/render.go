package inspect

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteJSON writes the report as one JSON object.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes the summary and one line per finding.
func (r Report) WriteText(w io.Writer) error {
	pending := 0 // behind and not yet invalidated: the pipeline has not caught up
	for _, f := range r.Findings {
		if !f.Invalidated && f.SourceVersion > f.CachedVersion {
			pending++
		}
	}
	fmt.Fprintf(w, "checked %d cached entries: %d consistent, %d expired (behind, never served again), %d behind and within their hard deadline (%d invalidated: served only while the source cannot answer; %d not yet invalidated), %d ahead; %d would be served while older than the %gs SLO\n",
		r.Checked, r.Consistent, r.Expired, r.Behind, r.Behind-pending, pending, r.Ahead, r.Violations, r.SLOSeconds)
	if len(r.Findings) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\ntenant\titem\tcached\tsource\tbehind for\tinvalidated\tserved for\tSLO violation")
	for _, f := range r.Findings {
		cached := fmt.Sprint(f.CachedVersion)
		if f.NotFound {
			cached = "not-found"
		}
		source := fmt.Sprint(f.SourceVersion)
		if f.SourceVersion == 0 {
			source = "absent"
		} else if f.SourceState == "deleted" {
			source += " (deleted)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.1fs\t%v\t%.1fs\t%v\n", f.Tenant, f.Item, cached, source, f.BehindForS, f.Invalidated, f.ServedForS, f.Violation)
	}
	return tw.Flush()
}
