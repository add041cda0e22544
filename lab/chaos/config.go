package chaos

import (
	"os"
	"slices"
	"strings"
	"time"

	"github.com/tidemark/tidemark/api"
	"github.com/tidemark/tidemark/audit"
	"github.com/tidemark/tidemark/catalog"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/kafkaconn"
	"github.com/tidemark/tidemark/promise"
)

// Config of one chaos run.
type Config struct {
	Duration    time.Duration // load and faults; setup and the final drain come on top
	Seed        int64         // drives the fault schedule and the load
	Faults      []string      // fault kinds to inject; empty or "all" = every kind that applies
	RateUpdates float64       // source row updates per second (SQL transactions and API PATCHes)
	RateReads   float64       // API reads per second
	FaultEvery  time.Duration // mean spacing of faults (dense schedule: shortened so every kind fits the run)
	Bound       time.Duration // the freshness promise checked on every answer
	Cluster     bool          // a 3-master Redis Cluster instead of one redis-server
	Kafka       []string      // external brokers; empty = an embedded broker process the faults may kill
	// KafkaConn is how the stages reach the external brokers (TLS, SASL),
	// given to them as the flags a user would write (a password as a file).
	KafkaConn kafkaconn.Config
	Binary    string // the tidemark binary run as capture, apply and serve
	LabBinary string // the tidemark-lab binary run as the embedded broker (kafka) when Kafka is empty, and as the proxies of FaultServeRedisCut
	Dir       string // work directory (servers' data and process logs)
	Keep      string // write the histories here as JSON lines ("" = not kept)
	Tenants   int
	Items     int // per tenant
	// SourceBudget is the shared foreground source-read budget (reads/s) the
	// serve processes run with (background gets half of it, read-your-writes
	// a quarter, inside the total of foreground + background); the cold-read
	// burst asks for more than it.
	SourceBudget float64
	// Table is the catalog table and its mapping, passed to every stage. A
	// table other than the default one is the operator's own: the harness
	// creates it (tenant, item, version, state, the updated-at column and
	// one jsonb payload column), then adopts it with `tidemark adopt`.
	Table catalog.Table
	// StageEnv is added to every stage's environment (tests use it for
	// test-only switches).
	StageEnv []string
	// UpgradeFrom is an older tidemark binary: every stage starts on it and
	// is replaced by Binary one process at a time during the run (a rolling
	// upgrade, upgrade.go).
	UpgradeFrom string
	// UpgradeNamespace moves the run from the default cache namespace to
	// this one during the run (a namespace upgrade on one source pool).
	UpgradeNamespace string

	// Schedule is ScheduleDense (every kind, as close as that needs) or
	// ScheduleSparse (FaultEvery apart, steady state between them: the
	// read SLO is judged).
	Schedule string
}

// DefaultConfig is `tidemark-lab chaos` with no flags.
func DefaultConfig() Config {
	return Config{Duration: 2 * time.Minute, Seed: 1, RateUpdates: 1000, RateReads: 3000, FaultEvery: 20 * time.Second,
		Bound: promise.Bound, Tenants: 2, Items: 2000, SourceBudget: 400, Table: catalog.DefaultTable(),
		Schedule: ScheduleDense}
}

// Fault kinds.
const (
	FaultKillCapture   = "kill-capture"
	FaultKillApply     = "kill-apply"
	FaultKillServe     = "kill-serve"
	FaultStopCapture   = "stop-capture"
	FaultStopApply     = "stop-apply"
	FaultStopServe     = "stop-serve"
	FaultRedisRestart  = "redis-restart"
	FaultRedisSnapshot = "redis-old-snapshot"
	FaultRedisReadonly = "redis-refuse-writes"
	FaultRedisHung     = "redis-hung"
	FaultPGRestart     = "pg-restart"
	FaultSourceStall   = "source-stall"
	FaultSlotDrop      = "slot-drop"
	FaultBrokerRestart = "broker-restart"
	FaultClockOffset   = "clock-offset"
	FaultColdBurst     = "cold-burst"
	FaultReshard       = "cluster-reshard"
	FaultKillMaster    = "cluster-kill-master"
	// Compound faults: what a bad day looks like.
	FaultLongOutage       = "long-outage"              // captures stopped past the bound, the source locked at its end
	FaultRedisLossNoApply = "redis-loss-appliers-down" // Redis back from an old snapshot while no applier runs
)

// AllFaults lists every kind in a stable order.
var AllFaults = []string{FaultKillCapture, FaultKillApply, FaultKillServe, FaultStopCapture, FaultStopApply, FaultStopServe,
	FaultRedisRestart, FaultRedisSnapshot, FaultRedisReadonly, FaultRedisHung, FaultPGRestart, FaultSourceStall,
	FaultSlotDrop, FaultBrokerRestart, FaultClockOffset, FaultColdBurst, FaultReshard, FaultKillMaster,
	FaultLongOutage, FaultRedisLossNoApply,
	FaultFutureHeartbeat, FaultMalformedHeartbeat, FaultTruncateFastClock, FaultExpiredFloors, FaultSharedHTTPCache,
	FaultSyncStandbyStall, FaultPromotion, FaultColdStart, FaultUnbumpedWrite, FaultBadVersionRow,
	FaultRogueApplier, FaultSecondTable, FaultServeRedisCut, FaultServeBudgetMismatch, FaultServeSecondPool, FaultServeSecondRedis, FaultPublicationGap, FaultTableRewrite, FaultCaptureStateLost,
	FaultServeCutRedisRewind, FaultSharedTopic}

// Applicable is the kinds this configuration can inject: broker faults need
// the embedded broker, cluster faults a Redis Cluster, and the faults that
// write catalog.items by its own column names its table.
func (c Config) Applicable() []string {
	var out []string
	for _, k := range AllFaults {
		switch {
		case k == FaultBrokerRestart && len(c.Kafka) > 0:
		case (k == FaultReshard || k == FaultKillMaster) && !c.Cluster:
		case (k == FaultServeRedisCut || k == FaultServeCutRedisRewind) && c.Cluster: // redirections name the servers, past the proxies
		case k == FaultServeSecondRedis && (c.Cluster || c.UpgradeFrom != ""): // a second standalone server; an old build does not register
		// A cold start moves capture and the appliers to a new topic: the
		// namespace upgrade's second applier group reads the first one, and
		// an old build may lack the cold start's reset.
		case k == FaultColdStart && (c.UpgradeNamespace != "" || c.UpgradeFrom != ""):
		case (k == FaultTruncateFastClock || k == FaultExpiredFloors || k == FaultColdStart) && c.foreign():
			// These write tidemark's own catalog.items by its column names.
		case (k == FaultServeBudgetMismatch || k == FaultServeSecondPool || k == FaultTableRewrite || k == FaultCaptureStateLost ||
			k == FaultServeCutRedisRewind || k == FaultSharedTopic) && c.UpgradeFrom != "":
			// An old build's serve processes register no budget settings,
			// in the pool or on the source, nor write back a rewound
			// presence, nor judge the watermark's source; its capture does
			// not watch the table's definition, nor reset on a lost state.
		case (k == FaultRogueApplier || k == FaultSecondTable) && (c.UpgradeNamespace != "" || c.UpgradeFrom != ""):
			// An old build has no namespace identity; an upgrade moves the
			// namespace and its group mid-run.
		default:
			out = append(out, k)
		}
	}
	return out
}

// Kinds resolves Faults: "all" (or nothing) is every applicable kind; "none"
// is no faults.
func (c Config) Kinds() []string {
	if len(c.Faults) == 0 || slices.Contains(c.Faults, "all") {
		if c.Duration < PromotionMinRun {
			return slices.DeleteFunc(c.Applicable(), func(k string) bool { return k == FaultPromotion })
		}
		return c.Applicable()
	}
	if slices.Contains(c.Faults, "none") {
		return nil
	}
	var out []string
	for _, k := range c.Applicable() {
		if slices.Contains(c.Faults, k) {
			out = append(out, k)
		}
	}
	return out
}

// serveProxies says whether a scheduled kind cuts a serve process off from
// Redis, which needs each to reach it through a proxy of its own.
func (c Config) serveProxies() bool {
	k := c.Kinds()
	return slices.Contains(k, FaultServeRedisCut) || slices.Contains(k, FaultServeCutRedisRewind)
}

// Validate reports every problem at once, one config.FieldError per field.
func (c Config) Validate() error {
	var p config.Problems
	if c.Duration < 10*time.Second {
		p.Add("Duration", "%s is too short (at least 10s)", c.Duration)
	}
	if !(c.RateUpdates > 0) {
		p.Add("RateUpdates", "must be a positive rate per second (got %g)", c.RateUpdates)
	}
	if !(c.RateReads > 0) {
		p.Add("RateReads", "must be a positive rate per second (got %g)", c.RateReads)
	}
	p.Positive("FaultEvery", c.FaultEvery)
	switch c.Schedule {
	case ScheduleDense:
	case ScheduleSparse:
		if c.FaultEvery < SparseMinEvery {
			p.Add("FaultEvery", "%s is too close for the sparse schedule (at least %s: a recovery and some steady state between faults)", c.FaultEvery, SparseMinEvery)
		}
	default:
		p.Add("Schedule", "must be %q or %q (got %q)", ScheduleDense, ScheduleSparse, c.Schedule)
	}
	p.Positive("Bound", c.Bound)
	if c.Tenants < 2 {
		p.Add("Tenants", "must be at least 2 (got %d): the tenant check needs two tenants sharing item ids", c.Tenants)
	}
	if c.Items < 10 {
		p.Add("Items", "must be at least 10 per tenant (got %d)", c.Items)
	}
	if !(c.SourceBudget > 0) {
		p.Add("SourceBudget", "must be positive (got %g)", c.SourceBudget)
	}
	if c.Binary == "" {
		p.Add("Binary", "the tidemark binary to run the stages is not set")
	}
	switch {
	case c.LabBinary != "":
	case len(c.Kafka) == 0:
		p.Add("LabBinary", "the tidemark-lab binary to run the embedded broker is not set")
	case c.serveProxies():
		p.Add("LabBinary", "the tidemark-lab binary to run the proxies of %s is not set", FaultServeRedisCut)
	}
	if c.UpgradeFrom != "" && c.UpgradeNamespace != "" {
		p.Add("UpgradeFrom", "a run does either a rolling upgrade or a namespace upgrade, not both")
	}
	if c.UpgradeFrom != "" {
		if st, err := os.Stat(c.UpgradeFrom); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			p.Add("UpgradeFrom", "%q is not an executable file", c.UpgradeFrom)
		}
	}
	if c.UpgradeNamespace == promise.Namespace || strings.ContainsAny(c.UpgradeNamespace, "{}: ") {
		p.Add("UpgradeNamespace", "must differ from %q and hold no '{', '}', ':' or space (got %q)", promise.Namespace, c.UpgradeNamespace)
	}
	p.Nested("Table", c.Table.Validate())
	if c.foreign() {
		// The load writes through the API and checks the payload it wrote:
		// the display must be one column, and deletes need tombstones.
		if err := c.Table.Writable(); err != nil {
			p.Add("Table.Payload", "the chaos harness needs one payload column it can write: %v", err)
		}
		if c.Table.StateColumn == "" {
			p.Add("Table.StateColumn", "the chaos harness needs a state column (its deletes are tombstones)")
		}
	}
	if c.KafkaConn != (kafkaconn.Config{}) && len(c.Kafka) == 0 {
		// Named by Kafka: it is the missing setting, and the one a flag fills.
		p.Add("Kafka", "is empty, but Kafka connection settings (TLS, SASL) are given: they need external brokers; the embedded broker takes none")
	}
	p.Nested("KafkaConn", c.KafkaConn.Validate())
	known := append(slices.Clone(AllFaults), "all", "none")
	for _, f := range c.Faults {
		if !slices.Contains(known, f) {
			p.Add("Faults", "unknown fault kind %q (known: %s)", f, strings.Join(known, ", "))
		}
	}
	for _, f := range c.Faults {
		if slices.Contains(AllFaults, f) && !slices.Contains(c.Applicable(), f) {
			p.Add("Faults", "fault kind %q does not apply here (broker faults need the embedded broker, cluster faults a Redis Cluster)", f)
		}
	}
	return p.Err()
}

// ForeignTableExample is an operator's own table as the chaos harness
// creates it: shop.products(shop_id, sku, rev, status, body, updated_at),
// tombstones 'gone', live rows 'live'.
func ForeignTableExample() catalog.Table {
	return catalog.Table{Name: "shop.products", TenantColumn: "shop_id", ItemColumn: "sku", VersionColumn: "rev",
		StateColumn: "status", DeletedState: "gone", ActiveState: "live", UpdatedAtColumn: "updated_at", Payload: []string{"body"}}
}

// foreign reports whether Table is another table than tidemark's own
// catalog.items, which the harness then creates and adopts.
func (c Config) foreign() bool { return c.Table.Qualified() != catalog.DefaultTable().Qualified() }

// tableFlags are the table mapping as the stages' flags (none for the
// default table).
func (c Config) tableFlags() []string {
	if !c.foreign() {
		return nil
	}
	t := c.Table
	args := []string{"--table", t.Name, "--tenant-column", t.TenantColumn, "--item-column", t.ItemColumn,
		"--version-column", t.VersionColumn, "--state-column", t.StateColumn, "--deleted-state", t.DeletedState,
		"--active-state", t.ActiveState, "--updated-at-column", t.UpdatedAtColumn}
	if t.PayloadSQL != "" {
		return append(args, "--payload-sql", t.PayloadSQL)
	}
	return append(args, "--payload-columns", strings.Join(t.Payload, ","))
}

// Limits is the source budget the serve processes run with, as the checker
// judges it: foreground SourceBudget, background half of it, and
// read-your-writes a quarter, all inside the total of foreground and
// background; the burst window, the source timeout and the auditor's batch
// are serve's defaults.
func (c Config) Limits() BudgetLimits {
	return BudgetLimits{Total: 1.5 * c.SourceBudget, Burst: Duration(api.DefaultConfig().BudgetBurst),
		LockWait: Duration(api.DefaultConfig().SourceTimeout), AtOnce: float64(audit.DefaultConfig().Batch),
		Classes: map[string]float64{ClassForeground: c.SourceBudget, ClassBackground: c.SourceBudget / 2, ClassReadYourWrites: c.SourceBudget / 4}}
}
