package e2ebench

import (
	"cmp"
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"

	"github.com/tidemark/tidemark/lab/bench"
)

// Goals, co-located on one 2-core box.
const (
	GoalTxP50      = 5 * time.Millisecond   // commit → applied at the single-row rate
	GoalTxP99      = 20 * time.Millisecond  // commit → applied at the single-row rate
	GoalChangesP99 = 250 * time.Millisecond // commit → applied at the multi-row rate
)

func ratio(a, b time.Duration) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fx", float64(a)/float64(b))
}

// ratio2 is a/b to two decimals, the precision of the Debezium goal.
func ratio2(a, b time.Duration) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", float64(a)/float64(b))
}

// GoalVsDebezium is tidemark's whole pipeline, commit → applied, against
// Debezium's capture alone, commit → its callback, at p50 and at p99.
const GoalVsDebezium = 1.0

// debeziumTable compares tidemark's commit → applied at the single-row rate
// (the first phase) with Debezium's commit → callback of the same run, the
// pg_recvlogical ceiling beside them; ok is false without both.
func (res Result) debeziumTable() (t bench.Table, ok bool) {
	d := res.Debezium
	if d == nil || len(res.Phases) == 0 {
		return t, false
	}
	tx, c := res.Phases[0], res.Ceiling
	t.Header = []string{"at " + tx.Name, "pg_recvlogical commit → received (ceiling)", "Debezium " + DebeziumVersion + " embedded, commit → callback",
		"tidemark, commit → applied", "tidemark / Debezium", fmt.Sprintf("goal ≤ %.1fx", GoalVsDebezium)}
	for _, q := range []struct {
		name               string
		ceil, dbz, applied time.Duration
	}{{"p50", c.P50, d.Callback.P50, tx.Applied.P50}, {"p99", c.P99, d.Callback.P99, tx.Applied.P99}} {
		met := q.dbz > 0 && float64(q.applied) <= GoalVsDebezium*float64(q.dbz) && tx.Unapplied == 0 && d.Unseen == 0
		t.Add(q.name, bench.Ms(q.ceil), bench.Ms(q.dbz), bench.Ms(q.applied), ratio2(q.applied, q.dbz), verdict(met))
	}
	// Each ran alone, one after the other: the rate each achieved and how
	// busy the machine was say whether they met the same conditions.
	rate := func(l loadResult) string {
		if l.Elapsed <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f", float64(l.Commits)/l.Elapsed.Seconds())
	}
	t.Add("achieved tx/s", rate(res.CeilingLoad), rate(d.Load), rate(tx.Load), "", "")
	busy := func(v float64) string { return fmt.Sprintf("%.2f of %d", v, runtime.NumCPU()) }
	t.Add("machine CPU busy during the load (cores, every process)", busy(res.CeilingBoxBusy), busy(d.BoxBusy), busy(tx.BoxBusy), "", "")
	return t, true
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

// Report writes the run as Markdown tables and the goals' verdicts.
func (res Result) WriteTable(out io.Writer) error {
	w, cfg := &bench.ErrWriter{W: out}, res.Config
	broker := "`tidemark-lab kafka` (page cache)"
	switch {
	case len(cfg.Brokers) > 0:
		broker = "external Kafka " + strings.Join(cfg.Brokers, ",")
	case cfg.SyncWrites:
		broker = "`tidemark-lab kafka --sync-writes`"
	}
	fmt.Fprintf(w, "broker: %s; each phase %s; ceiling load %d single-row tx (%.0f/s achieved); tidemark timed on rows numbered a multiple of %d\n\n",
		broker, cfg.Duration, res.CeilingLoad.Commits, float64(res.CeilingLoad.Commits)/res.CeilingLoad.Elapsed.Seconds(), cfg.ObserveEvery)

	c := res.Ceiling
	lat := bench.Table{Header: []string{"path", "load", "samples", "p50", "p90", "p99", "p99.9", "max", "p50 / ceiling", "p99 / ceiling"}}
	lat.Add("pg_recvlogical commit → received (ceiling)", fmt.Sprintf("%d tx/s", cfg.TxRate), fmt.Sprint(c.N),
		bench.Ms(c.P50), bench.Ms(c.P90), bench.Ms(c.P99), bench.Ms(c.P999), bench.Ms(c.Max), "1.0x", "1.0x")
	if d := res.Debezium; d != nil {
		cb := d.Callback
		lat.Add("Debezium "+DebeziumVersion+" embedded commit → callback", fmt.Sprintf("%d tx/s", cfg.TxRate), fmt.Sprint(cb.N),
			bench.Ms(cb.P50), bench.Ms(cb.P90), bench.Ms(cb.P99), bench.Ms(cb.P999), bench.Ms(cb.Max), ratio(cb.P50, c.P50), ratio(cb.P99, c.P99))
	}
	for _, p := range res.Phases {
		for _, row := range []struct {
			path string
			d    Dist
		}{{"tidemark commit → capture's produce call (1 ms resolution)", p.Handed}, {"tidemark commit → produced", p.Produced}, {"tidemark commit → applied", p.Applied}} {
			d := row.d
			lat.Add(row.path, p.Name, fmt.Sprint(d.N), bench.Ms(d.P50), bench.Ms(d.P90), bench.Ms(d.P99), bench.Ms(d.P999), bench.Ms(d.Max),
				ratio(d.P50, c.P50), ratio(d.P99, c.P99))
		}
	}
	lat.WriteTo(w)

	lag := bench.Table{Header: []string{"phase", "achieved changes/s", "timed / committed changes", "late tx", "unapplied (timed)", "p99 per 10 s window", "lag bounded", "machine CPU busy (cores)"}}
	for _, p := range res.Phases {
		var ws []string
		for _, d := range p.WindowP99 {
			if d == noSamples {
				ws = append(ws, "none")
				continue
			}
			ws = append(ws, fmt.Sprintf("%.0f", float64(d)/float64(time.Millisecond)))
		}
		late := fmt.Sprint(p.Load.Late)
		if p.Load.Lag != "" {
			late = p.Load.Lag
		}
		lag.Add(p.Name, fmt.Sprintf("%.0f", p.ChangeRate()), fmt.Sprintf("%d / %d", p.Load.Observed, p.Load.Changes), late, fmt.Sprint(p.Unapplied),
			strings.Join(ws, ", ")+" ms", fmt.Sprint(p.Bounded), fmt.Sprintf("%.2f of %d", p.BoxBusy, runtime.NumCPU()))
	}
	fmt.Fprintln(w)
	lag.WriteTo(w)

	cost := bench.Table{Header: []string{"phase", "CPU s / 1,000 changes: capture", "apply", "broker", "walsender",
		"redis-server", "bench (load + observers)", "peak RSS MiB: capture", "apply", "broker", "capture's visibility snapshots / tx"}}
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
		snaps := "-" // a capture build without the metric
		if v, ok := p.SnapshotsPerTx(); ok {
			snaps = fmt.Sprintf("%.2f", v)
		}
		cost.Add(p.Name, cpu(ProcCapture), cpu(ProcApply), cpu(ProcBroker), cpu(ProcWalsender), cpu(ProcRedis), cpu(ProcHarness),
			rss(ProcCapture), rss(ProcApply), rss(ProcBroker), snaps)
	}
	fmt.Fprintln(w)
	cost.WriteTo(w)
	if res.CeilingLoad.Commits > 0 {
		fmt.Fprintf(w, "\npg_recvlogical's walsender (test_decoding): %.3f CPU s / 1,000 changes\n",
			res.CeilingWalsenderCPU.Seconds()*1000/float64(res.CeilingLoad.Commits))
	}
	if t, ok := res.debeziumTable(); ok {
		d := res.Debezium
		fmt.Fprintf(w, "\nagainst Debezium %s embedded (same run, same %d single-row tx/s from pgbench, each alone on the box):\n\n", DebeziumVersion, cfg.TxRate)
		t.WriteTo(w)
		jvm, _ := d.CPUPer1k(ProcDebezium)
		wal, _ := d.CPUPer1k(ProcWalsender)
		fmt.Fprintf(w, "\nDebezium: %s; %d changes committed (%.0f tx/s achieved), %d timed (every change), %d not seen when the drain ended; %s; "+
			"CPU s / 1,000 changes: JVM %.3f, its walsender %.3f; JVM peak RSS %.0f MiB\n",
			strings.Join(debeziumSettings, ", "), d.Load.Changes, float64(d.Load.Commits)/d.Load.Elapsed.Seconds(), d.Callback.N, d.Unseen,
			cmp.Or(d.Commit, "no change seen"), jvm, wal, float64(d.RSS[ProcDebezium])/(1<<20))
	}
	if len(res.Phases) != 2 {
		return w.Err
	}
	tx, ch := res.Phases[0], res.Phases[1]
	fmt.Fprintln(w, "\ngoals:")
	fmt.Fprintf(w, "- %d tx/s commit → applied p50 %s <= %s: %s\n", cfg.TxRate, bench.Ms(tx.Applied.P50), bench.Ms(GoalTxP50), verdict(tx.Applied.P50 <= GoalTxP50 && tx.Unapplied == 0))
	fmt.Fprintf(w, "- %d tx/s commit → applied p99 %s <= %s: %s\n", cfg.TxRate, bench.Ms(tx.Applied.P99), bench.Ms(GoalTxP99), verdict(tx.Applied.P99 <= GoalTxP99 && tx.Unapplied == 0))
	fmt.Fprintf(w, "- %d changes/s commit → applied p99 %s <= %s, lag bounded: %s\n", cfg.ChangeRate, bench.Ms(ch.Applied.P99), bench.Ms(GoalChangesP99),
		verdict(ch.Applied.P99 <= GoalChangesP99 && ch.Bounded))
	for _, p := range res.Phases {
		capt, _ := p.CPUPer1k(ProcCapture)
		wal, _ := p.CPUPer1k(ProcWalsender)
		fmt.Fprintf(w, "- %s: capture CPU per change %.3f <= walsender's %.3f (s / 1,000): %s\n", p.Name, capt, wal, verdict(capt <= wal))
	}
	return w.Err
}
