// Package e2e is `tidemark-lab bench e2e`: capture, apply and the embedded broker
// run as separate processes of the tidemark binary (as users run them) against
// a private Postgres and redis-server, and the end-to-end latency of every
// change is measured from its commit timestamp in Postgres:
//
//   - the ceiling: pg_recvlogical's commit → received latency (the walsender's
//     own latency) under the same single-row load;
//   - commit → produced: when the bench reads the change back from Kafka;
//   - commit → applied: when Redis reports (keyspace notification) the
//     applier's write to the change's key;
//   - with Config.Debezium, Debezium's embedded engine (3.6.1, tuned for
//     latency) under the single-row load: commit → its callback, the
//     comparison issue 40 asks for.
//
// Each phase also reports CPU seconds per 1,000 changes of every process
// (capture, apply, broker, the walsender serving capture) from /proc, and
// each process's peak RSS.
package e2ebench

import (
	"slices"
	"strings"
	"time"

	"github.com/tidemark/tidemark/internal/config"
)

// Config drives Run.
type Config struct {
	Binary      string        // the tidemark executable the stages run from
	LabBinary   string        // the tidemark-lab executable that runs the broker when Brokers is empty
	Dir         string        // work directory (servers' data, process logs); "" = a temp dir, removed after
	Brokers     []string      // an external Kafka; empty starts `tidemark-lab kafka`
	SyncWrites  bool          // the started broker fsyncs every batch (`tidemark-lab kafka --sync-writes`)
	TxRate      int           // single-row transactions/s of the first phase and the ceiling
	ChangeRate  int           // changes/s of the multi-row phase
	RowsPerTx   int           // rows per transaction of the multi-row phase
	Duration    time.Duration // length of each measured phase
	Keys        int           // rows each phase cycles through (each touched at most once per cycle)
	Partitions  int           // partitions of the topic
	Drain       time.Duration // how long the tail may take to arrive after the load stops
	Recvlogical string        // pg_recvlogical path ("" = find it)
	CaptureArgs []string      // extra flags for the capture process (e.g. --linger=0)
	ApplyArgs   []string      // extra flags for the apply process
	Workers     int           // Postgres connections of the load generator
	Profile     bool          // stages write CPU profiles to Dir/<stage>.pprof (Dir must be set)
	Trace       bool          // stages write execution traces to Dir/<stage>.trace (Dir must be set)
	// ObserveEvery: the bench times the changes of every Nth row (rows whose
	// number is a multiple of N: 1, 10, 100 or 1000). Timing every change
	// costs the bench more CPU than any stage, on the cores the stages share.
	ObserveEvery int
	// Debezium also measures Debezium's embedded engine (debezium.go) under
	// the single-row load, between the ceiling and tidemark's phases, from
	// the jar DebeziumJar names (`make debezium` builds it).
	Debezium    bool
	DebeziumJar string
}

// DefaultConfig is the benchmark: 2,000 single-row tx/s and 20,000
// changes/s in 20-row transactions, 60 s each.
func DefaultConfig() Config {
	return Config{TxRate: 2000, ChangeRate: 20000, RowsPerTx: 20, Duration: 60 * time.Second, Keys: 100_000,
		Partitions: 12, Drain: 30 * time.Second, Workers: 32, ObserveEvery: 10,
		DebeziumJar: defaultDebeziumJar()}
}

// Validate reports every problem at once, one config.FieldError per field.
func (c Config) Validate() error {
	var p config.Problems
	if c.Binary == "" {
		p.Add("Binary", "the tidemark binary path is required")
	}
	if c.LabBinary == "" && len(c.Brokers) == 0 {
		p.Add("LabBinary", "the tidemark-lab binary path is required to start a broker")
	}
	for _, f := range []struct {
		field string
		n     int
	}{{"TxRate", c.TxRate}, {"ChangeRate", c.ChangeRate}, {"RowsPerTx", c.RowsPerTx}, {"Partitions", c.Partitions}, {"Workers", c.Workers}} {
		if f.n < 1 {
			p.Add(f.field, "must be positive (got %d)", f.n)
		}
	}
	if c.Duration < time.Second {
		p.Add("Duration", "must be at least 1s (got %s)", c.Duration)
	}
	if c.Drain < time.Second {
		p.Add("Drain", "must be at least 1s (got %s)", c.Drain)
	}
	if c.Keys < c.RowsPerTx {
		p.Add("Keys", "must be at least the rows per transaction (got %d < %d)", c.Keys, c.RowsPerTx)
	}
	switch c.ObserveEvery {
	case 1, 10, 100, 1000:
	default:
		p.Add("ObserveEvery", "must be 1, 10, 100 or 1000 (got %d)", c.ObserveEvery)
	}
	if c.Profile && c.Dir == "" {
		p.Add("Profile", "profiles are written to the work directory: set it")
	}
	if c.Trace && c.Dir == "" {
		p.Add("Trace", "traces are written to the work directory: set it")
	}
	if c.SyncWrites && len(c.Brokers) > 0 {
		p.Add("SyncWrites", "sync writes configure the started broker; an external Kafka has its own settings")
	}
	if c.Debezium && c.DebeziumJar == "" {
		p.Add("DebeziumJar", "the Debezium jar is required to measure Debezium (`make debezium` builds it)")
	}
	// The bench watches the topic, slot and group it gives the stages: an
	// extra flag that moved one would leave it waiting on the wrong one.
	for _, x := range []struct {
		field string
		args  []string
		owned []string
	}{
		{"CaptureArgs", c.CaptureArgs, []string{"pg", "kafka", "topic", "partitions", "slot"}},
		{"ApplyArgs", c.ApplyArgs, []string{"kafka", "redis", "topic", "group", "namespace"}},
	} {
		for _, a := range x.args {
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if slices.Contains(x.owned, name) {
				p.Add(x.field, "--%s is set by the bench itself (it watches what it gives the process)", name)
			}
		}
	}
	return p.Err()
}
