package chaos

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tidemark/tidemark/lab/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// testConfig is a run the shared 2-core CI box holds next to other tests:
// two runs at a time beside other packages. The load is most of a run's CPU
// (the harness's reads under -race, serve, Redis), and `make test` is bound
// by the box's CPU, so it is a light one: enough that a broken build fails
// (TestChaosCatchesBrokenInvalidate) and a starved budget misses its SLO
// (TestChaosReadSLOMissedUnderATooSmallBudget).
func testConfig(t *testing.T, binary string) Config {
	cfg := DefaultConfig()
	cfg.Binary, cfg.LabBinary = binary, testenv.LabBinary(t)
	cfg.RateUpdates, cfg.RateReads = 100, 250
	if testenv.RealKafka() { // TIDEMARK_TEST_KAFKA=real: the 3-broker Apache Kafka cluster
		// over SASL_SSL with ACLs enforced, as one user holding the
		// capture and apply rows of the README's table (and Create) for
		// the run's names: every stage reaches Kafka as a user would.
		k := testenv.StartKafka(t)
		cfg.Kafka, cfg.KafkaConn = k.SASL, k.KafkaUser(t, chaosKafkaACLs())
	}
	return cfg
}

// chaosKafkaACLs are the capture and apply rows of the README's Kafka ACL
// table, with Create, on every name a run makes: topics chaos.<run>,
// chaos.<run>.capture, chaos.<run>.dlq and group chaos-<run>.
func chaosKafkaACLs() []testenv.KafkaACL {
	var acls []testenv.KafkaACL
	for _, op := range []kmsg.ACLOperation{kmsg.ACLOperationCreate, kmsg.ACLOperationWrite, kmsg.ACLOperationRead, kmsg.ACLOperationDescribeConfigs} {
		acls = append(acls, testenv.KafkaACL{Resource: kmsg.ACLResourceTypeTopic, Name: "chaos.", Op: op, Prefixed: true})
	}
	return append(acls, testenv.KafkaACL{Resource: kmsg.ACLResourceTypeGroup, Name: "chaos-", Op: kmsg.ACLOperationRead, Prefixed: true})
}

// passed fails t unless rep checked at least minChecked answers and
// passes: no violation, an upgrade (if any) carried out.
func passed(t *testing.T, rep *Report, minChecked int64) {
	t.Helper()
	if rep.Checked < minChecked {
		t.Errorf("only %d answers checked", rep.Checked)
	}
	if !rep.Pass() {
		t.Errorf("%d violations (by kind %v); see the report above", rep.Violations, rep.ByKind)
	}
}

func run(t *testing.T, cfg Config) *Report {
	t.Helper()
	if cfg.Dir == "" {
		// A run's own directory, so that its stages' logs outlive it: a
		// failed test prints their warnings (the report says what broke,
		// the logs say why); Run removes the servers' data itself.
		dir, err := os.MkdirTemp("", "tidemark-chaos-")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Dir = dir
		t.Cleanup(func() {
			if t.Failed() {
				logStageWarnings(t, dir)
			}
			os.RemoveAll(dir)
		})
	}
	r, err := New(cfg, Deps{Log: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Context(t, cfg.Duration+5*time.Minute)
	rep, err := r.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	_ = rep.WriteText(&b) // a bytes.Buffer
	t.Logf("report:\n%s", b.String())
	return rep
}

// TestChaosShortRun is the seeded chaos run of `make test`: 90 s with every
// fault kind that applies; any violation fails it.
func TestChaosShortRun(t *testing.T) {
	t.Parallel() // see TestChaosRollingUpgrade
	cfg := testConfig(t, testenv.Binary(t))
	cfg.Duration, cfg.Seed = 90*time.Second, 12
	rep := run(t, cfg)
	for _, k := range cfg.Kinds() {
		if !slices.ContainsFunc(rep.Faults, func(f FaultRecord) bool { return f.Kind == k }) {
			t.Errorf("fault kind %s was not injected", k)
		}
	}
	// These kinds check the pipeline themselves (capture kept going).
	for _, f := range rep.Faults {
		if f.Kind == FaultMalformedHeartbeat && f.Error != "" {
			t.Errorf("%s: %s", f.Kind, f.Error)
		}
	}
	passed(t, rep, 1000)
}

// TestChaosPromotion promotes the primary's streaming standby under load
// (too slow for the short run's schedule): every process follows the
// multi-host DSN, capture takes the path its Postgres version has (the
// slot gone and a reset on 15 and 16, the failover slot kept on 17+), and
// no answer breaks the promise.
func TestChaosPromotion(t *testing.T) {
	t.Parallel() // see TestChaosRollingUpgrade
	cfg := testConfig(t, testenv.Binary(t))
	cfg.Duration, cfg.Seed, cfg.Faults = 60*time.Second, 14, []string{FaultPromotion}
	cfg.FaultEvery = time.Minute // one promotion
	rep := run(t, cfg)
	i := slices.IndexFunc(rep.Faults, func(f FaultRecord) bool { return f.Kind == FaultPromotion })
	if i < 0 {
		t.Fatal("the promotion was not injected")
	}
	f := rep.Faults[i]
	var version int
	if _, err := fmt.Sscanf(f.Target, "Postgres %d:", &version); err != nil {
		t.Fatalf("target %q: %v", f.Target, err)
	}
	want := "reset path"
	if version >= 17 {
		want = "failover-slot path"
	}
	if f.Error != "" || version == 0 || !strings.Contains(f.Target, want) {
		t.Errorf("promotion on Postgres %d: %q (error %q), want the %s", version, f.Target, f.Error, want)
	}
	passed(t, rep, 0)
}

// TestChaosForeignTable is a short run on an operator's own table, adopted:
// shop.products with its own column names and state values, the same
// table flags given to capture and serve. Source stalls lock it, so they
// are among the faults.
func TestChaosForeignTable(t *testing.T) {
	t.Parallel() // see TestChaosRollingUpgrade
	cfg := testConfig(t, testenv.Binary(t))
	cfg.Duration, cfg.Seed, cfg.Items = 40*time.Second, 27, 500
	cfg.Faults = []string{FaultKillApply, FaultSourceStall, FaultKillServe}
	cfg.Table = ForeignTableExample()
	rep := run(t, cfg)
	passed(t, rep, 500)
}

// TestChaosCatchesBrokenInvalidate runs a binary whose INVALIDATE does
// nothing: the watermark keeps extending replaced values, and the checker
// must say so. It proves the run cannot pass vacuously.
func TestChaosCatchesBrokenInvalidate(t *testing.T) {
	t.Parallel() // see TestChaosRollingUpgrade
	cfg := testConfig(t, testenv.BinaryWithTags(t, "tidemark_broken_invalidate"))
	cfg.Duration, cfg.Faults, cfg.Items = 45*time.Second, []string{"none"}, 200
	rep := run(t, cfg)
	if rep.Pass() || rep.ByKind[KindStale] == 0 {
		t.Fatalf("a cache tier that ignores invalidations passed: %d violations %v", rep.Violations, rep.ByKind)
	}
	if len(rep.FirstViolations) == 0 || len(rep.FirstViolations[0].History) < 2 {
		t.Fatalf("violations without evidence: %+v", rep.FirstViolations)
	}
}

// On an operator's own table the kinds that write catalog.items by its
// column names do not apply; sync-standby-stall, which writes its items
// through the table mapping, does.
func TestApplicableOnForeignTable(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Table = ForeignTableExample()
	kinds := cfg.Applicable()
	if !slices.Contains(kinds, FaultSyncStandbyStall) || slices.Contains(kinds, FaultTruncateFastClock) {
		t.Fatalf("applicable on %s: %v; want %s and not %s", cfg.Table.Name, kinds, FaultSyncStandbyStall, FaultTruncateFastClock)
	}
}

func TestConfigValidate(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Faults = []string{"kill-everything"}
	cfg.Duration = time.Second
	err := cfg.Validate()
	if err == nil {
		t.Fatal("bad config accepted")
	}
	for _, want := range []string{"kill-everything", "too short", "binary"} {
		if !bytes.Contains([]byte(err.Error()), []byte(want)) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	cfg = DefaultConfig()
	cfg.Binary, cfg.Faults = "/bin/true", []string{FaultReshard}
	if err := cfg.Validate(); err == nil {
		t.Fatal("a cluster fault without a cluster was accepted")
	}
	cfg = DefaultConfig()
	cfg.Binary, cfg.KafkaConn.SASLMechanism, cfg.KafkaConn.SASLUser, cfg.KafkaConn.SASLPassword = "/bin/true", "SCRAM-SHA-512", "u", "p"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "external brokers") {
		t.Fatalf("Kafka connection settings for the embedded broker: %v, want a refusal naming external brokers", err)
	}
	// External brokers need no lab binary, unless serve-redis-cut's
	// proxies are to run.
	cfg = DefaultConfig()
	cfg.Binary, cfg.Kafka = "/bin/true", []string{"127.0.0.1:9092"}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), FaultServeRedisCut) {
		t.Fatalf("every kind, external brokers, no lab binary: %v, want a refusal naming %s", err, FaultServeRedisCut)
	}
	cfg.Faults = []string{FaultKillServe}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("%s alone, external brokers, no lab binary: %v", FaultKillServe, err)
	}
}

// TestChaosClusterShortRun is the Redis Cluster part of `make test`'s chaos:
// slots resharded between masters under load, a master killed and replaced,
// and the Redis faults against one master of the three.
func TestChaosClusterShortRun(t *testing.T) {
	t.Parallel() // see TestChaosRollingUpgrade
	cfg := testConfig(t, testenv.Binary(t))
	cfg.Duration, cfg.Seed, cfg.Cluster = 60*time.Second, 13, true
	cfg.Faults = []string{FaultReshard, FaultKillMaster, FaultRedisRestart, FaultRedisSnapshot, FaultRedisHung, FaultRedisReadonly}
	rep := run(t, cfg)
	for _, k := range cfg.Faults {
		if !slices.ContainsFunc(rep.Faults, func(f FaultRecord) bool { return f.Kind == k && f.Error == "" }) {
			t.Errorf("fault kind %s was not injected cleanly", k)
		}
	}
	passed(t, rep, 0)
}

// TestChaosReadSLOMissedUnderATooSmallBudget is a sparse run (the read SLO
// judged) whose foreground budget, 20 reads/s, is far below what the test
// load's misses need (100 updates/s invalidate more keys a second than
// that, and 250 reads/s start on a cold cache): steady state keeps
// answering 503s, and the run must fail on the read SLO with the freshness
// promise and the source budget kept. It asks for a miss, not a met SLO:
// a loaded box does not make it pass.
func TestChaosReadSLOMissedUnderATooSmallBudget(t *testing.T) {
	t.Parallel() // see TestChaosRollingUpgrade
	cfg := testConfig(t, testenv.Binary(t))
	cfg.Duration, cfg.Seed, cfg.Faults, cfg.Schedule, cfg.FaultEvery = 60*time.Second, 41, []string{"none"}, ScheduleSparse, time.Minute
	cfg.SourceBudget = 20
	rep := run(t, cfg)
	if rep.FreshnessViolations() != 0 || rep.ByKind[KindBudget] != 0 {
		t.Errorf("freshness or budget violations: %v", rep.ByKind)
	}
	if rep.SLO == nil || !rep.SLO.Judged || rep.ByKind[KindSLO] == 0 || rep.Pass() ||
		!slices.ContainsFunc(rep.SLO.Misses, func(m string) bool { return strings.Contains(m, "steady-state success") }) {
		t.Fatalf("a steady state answering 503s passed the read SLO: %+v", rep.SLO)
	}
}

// logStageWarnings prints each stage log's last warnings and errors (at
// most 25 lines a log, each cut at 400 bytes) and its last line.
func logStageWarnings(t *testing.T, dir string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, path := range logs {
		f, err := os.Open(path)
		if err != nil {
			t.Logf("%s: %v", path, err)
			continue
		}
		var warn []string
		last := ""
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if len(line) > 400 {
				line = line[:400] + "..."
			}
			last = line
			if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
				warn = append(warn, line)
			}
		}
		f.Close()
		total := len(warn)
		if len(warn) > 25 {
			warn = warn[len(warn)-25:]
		}
		t.Logf("%s: %d warning lines (the last %d), last line:\n%s\n%s", filepath.Base(path), total, len(warn), strings.Join(warn, "\n"), last)
	}
}
