package e2ebench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The Debezium arm (Config.Debezium): Debezium's embedded engine with its
// Postgres connector (the program in debezium/, built by `make debezium`)
// under the single-row load of the ceiling and of tidemark's first phase,
// alone on the box between the two. Its callback writes, per change, the
// commit time Postgres sent with the transaction (source.ts_us, the
// timestamp capture and pg_recvlogical read) and the callback's time; the
// bench tails that file.

// ProcDebezium is the JVM running Debezium's embedded engine (in
// DebeziumPhase.CPU and RSS).
const ProcDebezium = "debezium"

// DebeziumVersion is the Debezium the jar is built from (debezium/pom.xml).
const DebeziumVersion = "3.6.1.Final"

const (
	debeziumSlot        = "e2e_debezium"
	debeziumPublication = "e2e_debezium"
	debeziumTenant      = "debezium"
	debeziumWarmTenant  = "debezium_warmup"
	// debeziumWarmup is the load at the phase's rate before the measured
	// one, discarded: the JVM compiles its hot path (tidemark's stages
	// get a warm-up phase too).
	debeziumWarmup = 10 * time.Second
)

// defaultDebeziumJar is where `make debezium` puts the jar.
func defaultDebeziumJar() string {
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".cache", "tidemark-debezium", "tidemark-bench-debezium.jar")
}

// debeziumSettings is the connector's configuration besides where Postgres
// is: pgoutput on a slot and a publication of its own, no snapshot, tuned
// for latency (a 1 ms poll, batches of at most 256).
var debeziumSettings = []string{
	"plugin.name=pgoutput", "slot.name=" + debeziumSlot,
	"publication.name=" + debeziumPublication, "publication.autocreate.mode=disabled",
	"table.include.list=catalog.items", "snapshot.mode=no_data",
	"poll.interval.ms=1", "max.batch.size=256",
}

// debeziumProps is the engine's properties: the connector, where Postgres
// is, and debeziumSettings.
func debeziumProps(pgPort int) []string {
	return append([]string{
		"connector.class=io.debezium.connector.postgresql.PostgresConnector", "topic.prefix=e2e",
		"database.hostname=127.0.0.1", "database.port=" + strconv.Itoa(pgPort), "database.user=postgres", "database.dbname=postgres",
	}, debeziumSettings...)
}

// DebeziumPhase is Debezium's embedded engine under the single-row load.
type DebeziumPhase struct {
	Load     loadResult
	Callback Dist   // commit → Debezium's callback, every change of the load
	Unseen   int    // committed changes the callback had not seen when the drain ended
	Commit   string // where the commit time came from (the program's note)
	CPU      map[string]time.Duration
	RSS      map[string]int64
	BoxBusy  float64 // cores the whole machine kept busy during the load
}

// CPUPer1k is process name's CPU seconds per 1,000 changes.
func (p DebeziumPhase) CPUPer1k(name string) (float64, bool) {
	c, ok := p.CPU[name]
	if !ok || p.Load.Changes == 0 {
		return 0, false
	}
	return c.Seconds() * 1000 / float64(p.Load.Changes), true
}

// debeziumSamples reads the samples file the program appends to: lines
// "commit_us callback_us" (microseconds since the epoch) and "# note"
// lines. A line is taken once it is complete.
type debeziumSamples struct {
	r       io.Reader
	rest    []byte    // the start of a line not yet complete
	seen    int       // changes read, recorded or not
	since   time.Time // changes committed before it are not recorded; zero: none is
	samples []sample
	note    string // the latest note
}

// read takes everything written since the last read.
func (d *debeziumSamples) read() error {
	buf := make([]byte, 64<<10)
	for {
		n, err := d.r.Read(buf)
		if n > 0 {
			if err := d.feed(buf[:n]); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) || (n == 0 && err == nil) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("bench e2e: Debezium's samples: %w", err)
		}
	}
}

// feed takes the next bytes of the file.
func (d *debeziumSamples) feed(b []byte) error {
	d.rest = append(d.rest, b...)
	for {
		i := bytes.IndexByte(d.rest, '\n')
		if i < 0 {
			break
		}
		line := string(d.rest[:i])
		d.rest = d.rest[i+1:]
		if note, ok := strings.CutPrefix(line, "# "); ok {
			d.note = note
			continue
		}
		s, err := parseDebeziumSample(line)
		if err != nil {
			return err
		}
		d.seen++
		if !d.since.IsZero() && !s.commit.Before(d.since) {
			d.samples = append(d.samples, s)
		}
	}
	d.rest = append([]byte(nil), d.rest...)
	return nil
}

// record times the changes committed from t on (the measured load's start).
func (d *debeziumSamples) record(t time.Time) { d.since = t }

// parseDebeziumSample reads "commit_us callback_us".
func parseDebeziumSample(line string) (sample, error) {
	c, a, ok := strings.Cut(line, " ")
	commit, err1 := strconv.ParseInt(c, 10, 64)
	at, err2 := strconv.ParseInt(a, 10, 64)
	if !ok || err1 != nil || err2 != nil || commit <= 0 || at <= 0 {
		return sample{}, fmt.Errorf("bench e2e: Debezium's samples: line %q is not \"commit_us callback_us\"", line)
	}
	return sample{time.UnixMicro(commit), time.Duration(at-commit) * time.Microsecond}, nil
}

// checkDebezium fails early, before any server starts, when the Debezium
// arm cannot run; it returns the java to run.
func checkDebezium(jar string) (string, error) {
	if _, err := os.Stat(jar); err != nil {
		return "", fmt.Errorf("bench e2e: the Debezium jar: %w: build it with `make debezium` (Maven and Java 17+; into ~/.cache/tidemark-debezium)", err)
	}
	java, err := exec.LookPath("java")
	if err != nil {
		return "", fmt.Errorf("bench e2e: Debezium needs java (17+) on PATH: %w", err)
	}
	return java, nil
}

// debeziumRun is the Debezium arm's inputs from Run.
type debeziumRun struct {
	cfg          Config
	java, dir    string
	pgPort       int
	pool         *pgxpool.Pool
	pgbench, dsn string
	log          *slog.Logger
}

// run measures Debezium: its publication, the engine on its own slot, a
// discarded warm-up, the measured load and its drain; then it stops the
// engine and drops what it made.
func (r debeziumRun) run(ctx context.Context) (ph DebeziumPhase, err error) {
	if _, err := r.pool.Exec(ctx, "CREATE PUBLICATION "+debeziumPublication+" FOR TABLE catalog.items"); err != nil {
		return ph, fmt.Errorf("bench e2e: Debezium's publication: %w", err)
	}
	defer func() {
		if _, e := r.pool.Exec(ctx, "DROP PUBLICATION IF EXISTS "+debeziumPublication); e != nil && err == nil {
			err = fmt.Errorf("bench e2e: drop Debezium's publication: %w", e)
		}
	}()
	file := filepath.Join(r.dir, "debezium.samples")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		return ph, err
	}
	f, err := os.Open(file)
	if err != nil {
		return ph, err
	}
	defer f.Close()
	tail := &debeziumSamples{r: f}
	r.log.Info("Debezium: starting its embedded engine", "version", DebeziumVersion, "jar", r.cfg.DebeziumJar)
	args := append([]string{"-Xms512m", "-Xmx1g", "-jar", r.cfg.DebeziumJar, file}, debeziumProps(r.pgPort)...)
	p, err := startProc(r.dir, ProcDebezium, diag{}, r.java, args...)
	if err != nil {
		return ph, err
	}
	stopped := false
	stop := func() error {
		if !stopped {
			stopped = true
			p.Stop(stopGrace)
			if err := tail.read(); err != nil {
				return err
			}
			return dropSlot(ctx, r.pool, debeziumSlot)
		}
		return nil
	}
	defer func() {
		if e := stop(); e != nil && err == nil {
			err = e
		}
	}()
	var walsender int
	if err := waitFor(2*time.Minute, "Debezium streams its slot", p, func() error {
		var pid *int32
		if err := r.pool.QueryRow(ctx, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1", debeziumSlot).Scan(&pid); err != nil {
			return err
		}
		if pid == nil {
			return errors.New("the slot is not streamed yet")
		}
		walsender = int(*pid)
		return nil
	}); err != nil {
		return ph, err
	}

	// The warm-up, discarded; then the tail is caught up before the load.
	r.log.Info("Debezium: warm-up", "tx_per_s", r.cfg.TxRate, "duration", debeziumWarmup)
	warm := &load{pool: r.pool, tenant: debeziumWarmTenant, keys: warmKeys, rows: 1, txRate: float64(r.cfg.TxRate), workers: r.cfg.Workers,
		pgbench: r.pgbench, dsn: r.dsn}
	wres, err := warm.run(ctx, debeziumWarmup)
	if err != nil {
		return ph, err
	}
	if err := r.drain(p, tail, func() bool { return int64(tail.seen) >= wres.Commits }); err != nil {
		return ph, err
	}
	tail.record(time.Now())

	r.log.Info("Debezium: phase", "tx_per_s", r.cfg.TxRate, "duration", r.cfg.Duration)
	m, err := newMeter(map[string]int{ProcDebezium: p.Pid(), ProcWalsender: walsender})
	if err != nil {
		return ph, err
	}
	l := &load{pool: r.pool, tenant: debeziumTenant, keys: r.cfg.Keys, rows: 1, txRate: float64(r.cfg.TxRate), workers: r.cfg.Workers,
		pgbench: r.pgbench, dsn: r.dsn}
	b0, t0, err := boxCPU()
	if err != nil {
		return ph, err
	}
	if ph.Load, err = l.run(ctx, r.cfg.Duration); err != nil {
		return ph, err
	}
	b1, t1, err := boxCPU()
	if err != nil {
		return ph, err
	}
	if t1 > t0 {
		ph.BoxBusy = float64(b1-b0) / float64(t1-t0) * float64(runtime.NumCPU())
	}
	if err := r.drain(p, tail, func() bool { return int64(len(tail.samples)) >= ph.Load.Commits }); err != nil {
		return ph, err
	}
	if ph.CPU, ph.RSS, err = m.usage(); err != nil {
		return ph, err
	}
	if err := stop(); err != nil {
		return ph, err
	}
	ph.Callback, ph.Commit = dist(tail.samples), tail.note
	ph.Unseen = max(0, int(ph.Load.Commits)-len(tail.samples))
	r.log.Info("Debezium: phase done", "commits", ph.Load.Commits, "seen", len(tail.samples), "p50", ph.Callback.P50, "p99", ph.Callback.P99)
	return ph, nil
}

// drain reads the samples until done holds or the drain time passes; it
// fails if the engine exits.
func (r debeziumRun) drain(p interface{ ExitErr() error }, tail *debeziumSamples, done func() bool) error {
	for deadline := time.Now().Add(r.cfg.Drain); ; time.Sleep(20 * time.Millisecond) {
		if err := tail.read(); err != nil {
			return err
		}
		if err := p.ExitErr(); err != nil {
			return fmt.Errorf("bench e2e: Debezium: %w", err)
		}
		if done() || time.Now().After(deadline) {
			return nil
		}
	}
}

// dropSlot drops slot once its walsender has released it (a client that
// has exited may still hold it for a moment on a loaded box).
func dropSlot(ctx context.Context, pool *pgxpool.Pool, slot string) error {
	// slot is one of the bench's constants: quoted as a literal here, since
	// a DO block takes no parameters.
	q := strings.ReplaceAll(`DO $$
		DECLARE deadline timestamptz := clock_timestamp() + interval '30 seconds';
		BEGIN
			WHILE EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = 'SLOT' AND active) LOOP
				IF clock_timestamp() > deadline THEN
					RAISE EXCEPTION 'slot SLOT still active after 30 s';
				END IF;
				PERFORM pg_sleep(0.05);
			END LOOP;
			PERFORM pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = 'SLOT';
		END $$`, "SLOT", slot)
	if _, err := pool.Exec(ctx, q); err != nil {
		return fmt.Errorf("bench e2e: drop slot %s: %w", slot, err)
	}
	return nil
}
