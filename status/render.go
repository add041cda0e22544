package status

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
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
	if r.Warm != nil {
		fmt.Fprintf(w, "  %s\n", r.Warm.Line)
	}
	if r.Audit != nil {
		fmt.Fprintf(w, "  audit: %s\n", r.Audit)
	}
	if len(r.Namespaces) > 1 {
		for _, n := range r.Namespaces {
			fmt.Fprintf(w, "  namespace %s\n", n)
		}
	}
	for _, ro := range r.Rollout {
		fmt.Fprintf(w, "  rollout %s\n", ro)
	}
	fmt.Fprintf(w, "  consumer lag    %d records\n", r.TotalLag)
	fmt.Fprintf(w, "  DLQ depth       %d records\n", r.DLQDepth)
	if len(r.EvictionPolicy) > 0 {
		var pols []string
		for addr, p := range r.EvictionPolicy {
			pols = append(pols, addr+" "+p)
		}
		sort.Strings(pols)
		fmt.Fprintf(w, "  maxmemory-policy %s\n", strings.Join(pols, ", "))
	}
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
	if r.SourceReaders != nil {
		fmt.Fprintf(w, "  source readers  %s\n", r.SourceReaders)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "partition\tend offset\tlast applied\tlag\twatermark age\tstate\t")
	var stalls []string
	for _, p := range r.Partitions {
		applied := "-"
		if p.Committed >= 0 {
			applied = fmt.Sprint(p.Committed)
		}
		state := "moving"
		if st := p.Stalled; st != nil {
			state = "STALLED " + r.CheckedAt.Sub(st.Since).Round(time.Second).String()
			stalls = append(stalls, fmt.Sprintf("  partition %d stalled since %s on %s: %s", p.Partition, st.Since.UTC().Format(time.RFC3339), st.Op, st.Error))
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%s\t%s\t\n", p.Partition, p.EndOffset, applied, p.Lag, age(p.WatermarkAgeS), state)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(stalls) > 0 {
		fmt.Fprintf(w, "\n%s\n", strings.Join(stalls, "\n"))
	}
	return nil
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
