package status

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// WriteJSON writes the report as one JSON object.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes the one-screen operator view.
func (r Report) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "tidemark status at %s: %s (%s)\n\n", r.CheckedAt.Format(time.RFC3339), r.Verdict, r.Reason)
	fmt.Fprintf(w, "  watermark age   %s   (bound on the age of the oldest pending event; warn %gs, SLO %gs)\n",
		age(r.WatermarkAgeS), r.WarnSeconds, r.SLOSeconds)
	if r.ResetAt != nil {
		fmt.Fprintf(w, "  reset_at        %s (%s ago)\n", r.ResetAt.Format(time.RFC3339), time.Since(*r.ResetAt).Round(time.Second))
	} else {
		fmt.Fprintf(w, "  reset_at        none\n")
	}
	fmt.Fprintf(w, "  consumer lag    %d records\n", r.TotalLag)
	fmt.Fprintf(w, "  DLQ depth       %d records\n", r.DLQDepth)
	if s := r.Slot; s != nil {
		if !s.Exists {
			fmt.Fprintf(w, "  slot %-10s missing\n", s.Name)
		} else {
			active := "inactive"
			if s.Active {
				active = "active"
			}
			fmt.Fprintf(w, "  slot %-10s %s, lag %s, wal_status %s\n", s.Name, active, bytes(s.LagBytes), s.WALStatus)
		}
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "partition\tend offset\tlast applied\tlag\twatermark age\t")
	for _, p := range r.Partitions {
		applied := "-"
		if p.Committed >= 0 {
			applied = fmt.Sprint(p.Committed)
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%s\t\n", p.Partition, p.EndOffset, applied, p.Lag, age(p.WatermarkAgeS))
	}
	return tw.Flush()
}

func age(s *float64) string {
	if s == nil {
		return "unknown"
	}
	return (time.Duration(*s * float64(time.Second))).Round(100 * time.Millisecond).String()
}

func bytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
