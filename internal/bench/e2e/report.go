package e2e

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Goals, co-located on one 2-core box.
const (
	GoalTxP50      = 5 * time.Millisecond   // commit → applied at the single-row rate
	GoalTxP99      = 20 * time.Millisecond  // commit → applied at the single-row rate
	GoalChangesP99 = 250 * time.Millisecond // commit → applied at the multi-row rate
)

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

func ratio(a, b time.Duration) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fx", float64(a)/float64(b))
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

// Report writes the run as markdown tables.
func Report(w io.Writer, cfg Config, res Result) {
	broker := "`tidemark kafka` (page cache)"
	switch {
	case len(cfg.Brokers) > 0:
		broker = "external Kafka " + strings.Join(cfg.Brokers, ",")
	case cfg.SyncWrites:
		broker = "`tidemark kafka --sync-writes`"
	}
	fmt.Fprintf(w, "broker: %s; each phase %s; ceiling load %d single-row tx (%.0f/s achieved)\n\n",
		broker, cfg.Duration, res.CeilingLoad.Commits, float64(res.CeilingLoad.Commits)/res.CeilingLoad.Elapsed.Seconds())
	fmt.Fprintln(w, "| path | load | samples | p50 | p90 | p99 | p99.9 | max | p50 / ceiling | p99 / ceiling |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	c := res.Ceiling
	fmt.Fprintf(w, "| pg_recvlogical commit → received (ceiling) | %d tx/s | %d | %s | %s | %s | %s | %s | 1.0x | 1.0x |\n",
		cfg.TxRate, c.N, ms(c.P50), ms(c.P90), ms(c.P99), ms(c.P999), ms(c.Max))
	for _, p := range res.Phases {
		for _, row := range []struct {
			path string
			d    Dist
		}{{"tidemark commit → produced", p.Produced}, {"tidemark commit → applied", p.Applied}} {
			fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", row.path, p.Name, row.d.N,
				ms(row.d.P50), ms(row.d.P90), ms(row.d.P99), ms(row.d.P999), ms(row.d.Max), ratio(row.d.P50, c.P50), ratio(row.d.P99, c.P99))
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| phase | achieved changes/s | late tx | unapplied | p99 per 10 s window | lag bounded |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, p := range res.Phases {
		var ws []string
		for _, d := range p.WindowP99 {
			ws = append(ws, fmt.Sprintf("%.0f", float64(d)/float64(time.Millisecond)))
		}
		fmt.Fprintf(w, "| %s | %.0f | %d | %d | %s ms | %v |\n", p.Name, p.ChangeRate(), p.Load.Late, p.Unapplied, strings.Join(ws, ", "), p.Bounded)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| phase | CPU s / 1,000 changes: capture | apply | broker | walsender | peak RSS MiB: capture | apply | broker |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, p := range res.Phases {
		cpu := func(n string) string {
			if v, ok := p.CPUPer1k(n); ok {
				return fmt.Sprintf("%.3f", v)
			}
			return "-"
		}
		rss := func(n string) string {
			if v, ok := p.RSS[n]; ok {
				return fmt.Sprintf("%.0f", float64(v)/(1<<20))
			}
			return "-"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", p.Name, cpu(ProcCapture), cpu(ProcApply), cpu(ProcBroker), cpu(ProcWalsender),
			rss(ProcCapture), rss(ProcApply), rss(ProcBroker))
	}
	if res.CeilingLoad.Commits > 0 {
		fmt.Fprintf(w, "\npg_recvlogical's walsender (test_decoding): %.3f CPU s / 1,000 changes\n",
			res.CeilingWalsenderCPU.Seconds()*1000/float64(res.CeilingLoad.Commits))
	}
	fmt.Fprintln(w, "\ngoals:")
	if len(res.Phases) == 2 {
		tx, ch := res.Phases[0], res.Phases[1]
		fmt.Fprintf(w, "- %d tx/s commit → applied p50 %s <= %s: %s\n", cfg.TxRate, ms(tx.Applied.P50), ms(GoalTxP50), verdict(tx.Applied.P50 <= GoalTxP50 && tx.Unapplied == 0))
		fmt.Fprintf(w, "- %d tx/s commit → applied p99 %s <= %s: %s\n", cfg.TxRate, ms(tx.Applied.P99), ms(GoalTxP99), verdict(tx.Applied.P99 <= GoalTxP99 && tx.Unapplied == 0))
		fmt.Fprintf(w, "- %d changes/s commit → applied p99 %s <= %s, lag bounded: %s\n", cfg.ChangeRate, ms(ch.Applied.P99), ms(GoalChangesP99),
			verdict(ch.Applied.P99 <= GoalChangesP99 && ch.Bounded))
		for _, p := range res.Phases {
			capt, _ := p.CPUPer1k(ProcCapture)
			wal, _ := p.CPUPer1k(ProcWalsender)
			fmt.Fprintf(w, "- %s: capture CPU per change %.3f <= walsender's %.3f (s / 1,000): %s\n", p.Name, capt, wal, verdict(capt <= wal))
		}
	}
}
