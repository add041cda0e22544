// Package status is the operator's freshness gate: one read of Kafka, the
// cache tier and (optionally) Postgres that says whether the pipeline keeps
// its freshness promise. `tidemark status` prints it; deploys and alerts gate
// on its exit code.
package status

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/applier"
	"github.com/tidemark/tidemark/cache"

	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/kafkaconn"
	"github.com/tidemark/tidemark/internal/secretfile"
	"github.com/tidemark/tidemark/promise"
)

// Verdicts, from the watermark age (the bound on the oldest pending event's age).
const (
	OK       = "OK"       // age <= Warn
	AtRisk   = "AT RISK"  // Warn < age <= SLO
	Breached = "BREACHED" // age > SLO, or no watermark at all
)

// Config of one status check.
type Config struct {
	Brokers   []string
	Kafka     kafkaconn.Config // TLS and SASL
	Topic     string
	Group     string // the applier's consumer group (empty: applier.GroupFor(Namespace))
	Redis     string
	RedisConn cache.RedisConfig // TLS, credentials, mode (its URL is Redis)
	Namespace string
	// SourcePool is the serve processes' source pool, which names the
	// rollout settings (empty: promise.SourcePool, serve's default)
	SourcePool string
	PG         string // optional: slot health
	PGFile     string // the file PG came from, read again at each check (a rotated password)
	Slot       string
	SLO        time.Duration
	Warn       time.Duration
	Timeout    time.Duration // bound on the whole check
}

// DefaultConfig matches the pipeline's defaults.
func DefaultConfig() Config {
	return Config{Topic: promise.Topic, Namespace: promise.Namespace,
		Slot: promise.Slot, SLO: promise.Bound, Warn: promise.WatermarkWarn, Timeout: 10 * time.Second}
}

// Validate reports every problem at once, one config.FieldError per field.
func (c Config) Validate() error {
	var p config.Problems
	if len(c.Brokers) == 0 {
		p.Add("Brokers", "is required")
	}
	p.Nested("Kafka", c.Kafka.Validate())
	if c.Redis == "" {
		p.Add("Redis", "is required")
	}
	if c.Topic == "" {
		p.Add("Topic", "must not be empty")
	}
	p.Positive("SLO", c.SLO)
	// A healthy idle pipeline's watermark ages this far between heartbeats.
	if idle := promise.MaxHeartbeat + promise.HeartbeatMargin; c.Warn < idle || c.Warn > c.SLO {
		p.Add("Warn", "must be at least %s (a healthy idle pipeline's watermark ages that far between heartbeats) and at most the SLO %s (got %s)", idle, c.SLO, c.Warn)
	}
	p.Positive("Timeout", c.Timeout)
	return p.Err()
}

// Partition is one partition's line of the report.
type Partition struct {
	Partition     int32    `json:"partition"`
	EndOffset     int64    `json:"end_offset"`
	Committed     int64    `json:"committed_offset"` // -1: nothing committed yet
	Lag           int64    `json:"lag_records"`
	WatermarkAgeS *float64 `json:"watermark_age_seconds"` // nil: no watermark for this partition yet
	LastWatermark string   `json:"last_watermark,omitempty"`
	// Stalled is set while the applier holds the partition because a Redis
	// write keeps failing (read from the stall note the applier commits
	// with the partition's offset; see applier.Stall).
	Stalled *applier.Stall `json:"stalled,omitempty"`
}

// Slot is the replication slot's health (when Config.PG is set).
type Slot struct {
	Name      string `json:"name"`
	Exists    bool   `json:"exists"`
	Active    bool   `json:"active"`
	LagBytes  int64  `json:"lag_bytes"`
	WALStatus string `json:"wal_status"`
}

// Report is the result of a check.
type Report struct {
	Verdict string `json:"verdict"`
	Reason  string `json:"reason"`
	// ProcessReady is the serving process's own readiness, on its status
	// page only ("ready" or "not ready: <reason>"; empty from tidemark status)
	ProcessReady  string      `json:"process_ready,omitempty"`
	CheckedAt     time.Time   `json:"checked_at"`
	WatermarkAgeS *float64    `json:"watermark_age_seconds"` // nil: unknown (a partition has none)
	Watermark     *time.Time  `json:"watermark,omitempty"`
	ResetAt       *time.Time  `json:"reset_at,omitempty"`
	TotalLag      int64       `json:"total_lag_records"`
	DLQDepth      int64       `json:"dlq_depth"`
	Partitions    []Partition `json:"partitions"`
	Slot          *Slot       `json:"slot,omitempty"`
	// EvictionPolicy is each Redis master's maxmemory-policy; allkeys-*
	// may evict the watermark hash (reset_at), see cache.CheckEvictionPolicy.
	EvictionPolicy map[string]string `json:"maxmemory_policy,omitempty"`
	// FutureRefused counts resolved times the cache tier refused as ahead
	// of its clock (ever; a recent one is in the verdict).
	FutureRefused int64   `json:"future_refused,omitempty"`
	SLOSeconds    float64 `json:"slo_seconds"`
	WarnSeconds   float64 `json:"warn_seconds"`
	// Warm is the warmer's last or current run (nil: never ran); Audit the
	// auditor's figures of the process serving the status page.
	Warm  *WarmUp `json:"warm,omitempty"`
	Audit *Audit  `json:"audit,omitempty"`
	// Rollout is every tenant with a serving-mode setting or shadow
	// comparisons (package rollout); empty: all follow serve's default.
	Rollout []Rollout `json:"rollout,omitempty"`
	// Namespaces is every cache-tier namespace the serve processes of the
	// source pool have served within a day: more than one while a namespace
	// upgrade is under way (the old one serving, draining or drained).
	Namespaces []Namespace `json:"namespaces,omitempty"`
	// SourceReaders is the serve processes registered on the source (with
	// --pg): each set of buckets among them admits an even share of one
	// budget.
	SourceReaders *SourceReaders `json:"source_readers,omitempty"`
	// Source is the server's system identifier and the database given
	// with --pg ("<sysid>/<db>"); WatermarkSources the sources of the
	// markers that set the partitions' watermarks (sources.go).
	Source           string   `json:"source,omitempty"`
	WatermarkSources []string `json:"watermark_sources,omitempty"`
}

// Check reads everything once. An error means the state could not be read
// (exit 2), not that the pipeline is unhealthy.
func Check(ctx context.Context, cfg Config) (Report, error) {
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	now := time.Now()
	rep := Report{CheckedAt: now.UTC(), SLOSeconds: cfg.SLO.Seconds(), WarnSeconds: cfg.Warn.Seconds()}

	wm, pols, err := readCache(ctx, cfg)
	if err != nil {
		return rep, err
	}
	rep.EvictionPolicy = pols
	if rep.Warm, err = readWarm(ctx, cfg); err != nil {
		return rep, fmt.Errorf("status: %w", err)
	}
	if rep.Rollout, err = readRollout(ctx, cfg); err != nil {
		return rep, fmt.Errorf("status: %w", err)
	}
	if rep.Namespaces, err = readNamespaces(ctx, cfg, now); err != nil {
		return rep, fmt.Errorf("status: %w", err)
	}
	if err := readKafka(ctx, cfg, &rep, wm, now); err != nil {
		return rep, err
	}
	if cfg.PG != "" {
		if err := readSource(ctx, cfg, &rep); err != nil {
			return rep, err
		}
	}
	if !wm.ResetAt.IsZero() {
		t := wm.ResetAt.UTC()
		rep.ResetAt = &t
	}
	rep.verdict(cfg, wm, now)
	rep.sources(wm)
	rep.futureRefusals(wm)
	rep.stalled(now)
	rep.evictable()
	rep.upgrade(cfg)
	return rep, nil
}

// stalled makes a held partition part of the verdict: its watermark stops,
// so the verdict is at least AT RISK, and the reason names the Redis error.
func (rep *Report) stalled(now time.Time) {
	var notes []string
	for _, p := range rep.Partitions {
		if st := p.Stalled; st != nil {
			notes = append(notes, fmt.Sprintf("partition %d stalled for %s on %s: %s", p.Partition, round(now.Sub(st.Since)), st.Op, st.Error))
		}
	}
	if len(notes) == 0 {
		return
	}
	if rep.Verdict == OK {
		rep.Verdict = AtRisk
	}
	rep.Reason += "; " + strings.Join(notes, "; ")
}

// evictable makes an allkeys-* maxmemory-policy part of the verdict: reset_at
// may be evicted, so entries from before a gap could be extended again.
func (rep *Report) evictable() {
	var bad []string
	for addr, p := range rep.EvictionPolicy {
		if strings.HasPrefix(p, "allkeys-") {
			bad = append(bad, addr+" "+p)
		}
	}
	if len(bad) == 0 {
		return
	}
	sort.Strings(bad)
	if rep.Verdict == OK {
		rep.Verdict = AtRisk
	}
	rep.Reason += "; maxmemory-policy may evict the watermark hash (" + strings.Join(bad, ", ") + "): use volatile-lru or volatile-ttl"
}

func (rep *Report) verdict(cfg Config, wm cache.Watermark, now time.Time) {
	if !wm.Known {
		var missing []string
		for _, p := range rep.Partitions {
			if p.WatermarkAgeS == nil {
				missing = append(missing, fmt.Sprint(p.Partition))
			}
		}
		if rep.pending(cfg, wm) {
			return
		}
		rep.Verdict = Breached
		rep.Reason = "no freshness watermark"
		if len(missing) > 0 {
			rep.Reason += " for partition(s) " + strings.Join(missing, ",")
		}
		if len(wm.Ahead) > 0 {
			rep.Reason += fmt.Sprintf(" (partition(s) %s ahead of the cache tier's clock by more than %s: they vouch for nothing)",
				joinInts(wm.Ahead), promise.ClockBound)
		}
		if g := grown(wm); g != "" {
			rep.Reason += fmt.Sprintf(" (%s %s ago, longer than the SLO %s: is capture following the topic?)", g, round(wm.ServerNow.Sub(wm.GrownAt)), cfg.SLO)
		}
		rep.Reason += ": nothing bounds the age of pending events (is the applier running? is capture sending heartbeats?)"
		return
	}
	age := now.Sub(wm.W)
	secs := age.Seconds()
	w := wm.W.UTC()
	rep.WatermarkAgeS, rep.Watermark = &secs, &w
	switch {
	case age <= cfg.Warn:
		rep.Verdict, rep.Reason = OK, fmt.Sprintf("watermark age %s <= warn %s", round(age), cfg.Warn)
	case age <= cfg.SLO:
		rep.Verdict, rep.Reason = AtRisk, fmt.Sprintf("watermark age %s > warn %s (SLO %s)", round(age), cfg.Warn, cfg.SLO)
	default:
		rep.Verdict, rep.Reason = Breached, fmt.Sprintf("watermark age %s > SLO %s", round(age), cfg.SLO)
	}
	// Partitions the topic has and the watermark does not count yet: the
	// topic grew and no applier or marker has raised the count.
	var beyond []string
	for _, p := range rep.Partitions {
		if int(p.Partition) >= wm.Partitions {
			beyond = append(beyond, fmt.Sprint(p.Partition))
		}
	}
	if len(beyond) > 0 {
		if rep.Verdict == OK {
			rep.Verdict = AtRisk
		}
		rep.Reason += fmt.Sprintf("; partition(s) %s are not in the watermark yet (the topic has %d, the watermark counts %d): pending",
			strings.Join(beyond, ","), len(rep.Partitions), wm.Partitions)
	}
}

// grown describes the topic's last growth ("" if it never grew).
func grown(wm cache.Watermark) string {
	if wm.GrownFrom <= 0 || wm.GrownAt.IsZero() {
		return ""
	}
	return fmt.Sprintf("the topic grew from %d to %d partitions", wm.GrownFrom, wm.Partitions)
}

// pending judges a watermark unknown only because partitions the topic
// grew by have no watermark yet: they are pending, not lost, for one SLO
// after the growth (capture marks them within seconds, an applier is
// assigned them within its topic interval). Entries meanwhile fall back
// to their own observation, so the verdict is AT RISK with the age the
// older partitions vouch for; past the SLO it is BREACHED.
func (rep *Report) pending(cfg Config, wm cache.Watermark) bool {
	if grown(wm) == "" || len(wm.Ahead) > 0 || wm.ServerNow.Sub(wm.GrownAt) > cfg.SLO {
		return false
	}
	var old time.Time
	var waiting []string
	for p := 0; p < wm.Partitions; p++ {
		ts, ok := wm.PerPartition[int32(p)]
		switch {
		case !ok && p < wm.GrownFrom:
			return false // an old partition lost its watermark
		case !ok:
			waiting = append(waiting, fmt.Sprint(p))
		case p < wm.GrownFrom && (old.IsZero() || ts.Before(old)):
			old = ts
		}
	}
	if len(waiting) == 0 || old.IsZero() {
		return false
	}
	rep.Verdict = AtRisk
	rep.Reason = fmt.Sprintf("%s %s ago: partition(s) %s wait for their first resolved marker (the older partitions' watermark is %s old); nothing is extended by the watermark until they have one",
		grown(wm), round(wm.ServerNow.Sub(wm.GrownAt)), strings.Join(waiting, ","), round(wm.ServerNow.Sub(old)))
	return true
}

// futureRefusals makes a recently refused resolved time part of the verdict:
// some host's clock (Postgres's, most likely) is ahead of the cache tier's,
// or a heartbeat message was sent by hand; the watermark holds meanwhile.
func (rep *Report) futureRefusals(wm cache.Watermark) {
	rep.FutureRefused = wm.FutureRefused
	if wm.FutureRefused == 0 || wm.ServerNow.Sub(wm.FutureRefusedAt) > futureRefusalRecent {
		return
	}
	if rep.Verdict == OK {
		rep.Verdict = AtRisk
	}
	rep.Reason += fmt.Sprintf("; resolved time %s for %s refused %s ago: %s ahead of the cache tier's clock (%d refused in all; is the Postgres clock stepped?)",
		wm.FutureValue.UTC().Format(time.RFC3339Nano), wm.FutureField, round(wm.ServerNow.Sub(wm.FutureRefusedAt)),
		round(wm.FutureValue.Sub(wm.FutureRefusedAt)), wm.FutureRefused)
}

// futureRefusalRecent is how long a refused resolved time keeps the verdict
// at least AT RISK.
const futureRefusalRecent = time.Minute

func joinInts(ps []int32) string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = fmt.Sprint(p)
	}
	return strings.Join(out, ",")
}

func round(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }

// readCache reads the watermark hash and every master's maxmemory-policy.
func readCache(ctx context.Context, cfg Config) (cache.Watermark, map[string]string, error) {
	rdb, err := cfg.openRedis()
	if err != nil {
		return cache.Watermark{}, nil, err
	}
	defer rdb.Close()
	ccfg := cache.DefaultConfig()
	ccfg.Namespace = cfg.Namespace
	cc, err := cache.New(ccfg, cache.Deps{Redis: rdb, Log: nil, Registerer: nil})
	if err != nil {
		return cache.Watermark{}, nil, fmt.Errorf("status: %w", err)
	}
	wm, err := cc.ReadWatermark(ctx)
	if err != nil {
		return wm, nil, fmt.Errorf("status: %w", err)
	}
	pols, err := cc.EvictionPolicies(ctx)
	if err != nil {
		return wm, nil, fmt.Errorf("status: %w", err)
	}
	return wm, pols, nil
}

func readKafka(ctx context.Context, cfg Config, rep *Report, wm cache.Watermark, now time.Time) error {
	opts, err := kafkaconn.Opts(cfg.Brokers, cfg.Kafka, nil)
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("status: kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	dlq := cfg.Topic + ".dlq"
	ends, err := listEnds(ctx, adm, cfg.Topic, dlq)
	if err != nil {
		return fmt.Errorf("status: list end offsets: %w", err)
	}
	starts, err := adm.ListStartOffsets(ctx, dlq)
	if err != nil {
		return fmt.Errorf("status: list start offsets: %w", err)
	}
	group := cfg.Group
	if group == "" {
		group = applier.GroupFor(cfg.Namespace)
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return fmt.Errorf("status: fetch offsets of group %s: %w", group, err)
	}
	topicEnds, ok := ends[cfg.Topic]
	if !ok || len(topicEnds) == 0 {
		return fmt.Errorf("status: topic %s not found (has capture run?)", cfg.Topic)
	}
	for p, lo := range topicEnds {
		if lo.Err != nil {
			return fmt.Errorf("status: end offset of %s/%d: %w", cfg.Topic, p, lo.Err)
		}
		part := Partition{Partition: p, EndOffset: lo.Offset, Committed: -1}
		if o, ok := committed.Lookup(cfg.Topic, p); ok && o.Err == nil {
			part.Committed = o.At
			if st, ok := applier.ParseStall(o.Metadata); ok {
				part.Stalled = &st
			}
		}
		start := int64(0)
		if part.Committed >= 0 {
			start = part.Committed
		}
		part.Lag = max(0, lo.Offset-start)
		rep.TotalLag += part.Lag
		if ts, ok := wm.PerPartition[p]; ok {
			a := now.Sub(ts).Seconds()
			part.WatermarkAgeS = &a
			part.LastWatermark = ts.UTC().Format(time.RFC3339Nano)
		}
		rep.Partitions = append(rep.Partitions, part)
	}
	sort.Slice(rep.Partitions, func(i, j int) bool { return rep.Partitions[i].Partition < rep.Partitions[j].Partition })
	for p, lo := range ends[dlq] {
		if lo.Err != nil {
			continue // no DLQ topic yet: nothing dead-lettered
		}
		first := int64(0)
		if so, ok := starts.Lookup(dlq, p); ok && so.Err == nil {
			first = so.Offset
		}
		rep.DLQDepth += max(0, lo.Offset-first)
	}
	return nil
}

// readSource reads the slot's health and the source's readers (the serve
// processes registered on it, sourcereaders.go in package reader).
func readSource(ctx context.Context, cfg Config, rep *Report) error {
	cc, err := secretfile.PGConfig(cfg.PG, cfg.PGFile)
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("status: connect to postgres: %w", err)
	}
	defer conn.Close(context.Background())
	slot, err := readSlot(ctx, conn, cfg.Slot)
	if err != nil {
		return err
	}
	rep.Slot = &slot
	rep.SourceReaders = readSourceReaders(ctx, conn)
	rep.Source, err = readSourceName(ctx, conn)
	return err
}

func readSlot(ctx context.Context, conn *pgx.Conn, name string) (Slot, error) {
	s := Slot{Name: name}
	err := conn.QueryRow(ctx, `SELECT active, coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::bigint, coalesce(wal_status, '')
		FROM pg_replication_slots WHERE slot_name = $1`, name).Scan(&s.Active, &s.LagBytes, &s.WALStatus)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return s, nil
	case err != nil:
		return s, fmt.Errorf("status: read slot %s: %w", name, err)
	}
	s.Exists = true
	return s, nil
}

// openRedis connects to the cache tier as the process's flags say.
func (c Config) openRedis() (redis.UniversalClient, error) {
	rc := c.RedisConn
	rc.URL = c.Redis
	return cache.OpenRedis(rc, nil)
}

// endsRetry bounds how long listEnds asks again while a partition's end
// offset is a retriable error.
const endsRetry = 5 * time.Second

// listEnds lists the end offsets of topic and of others, asking again for
// up to endsRetry while one of topic's partitions answers a retriable
// error: right after partitions are added, a broker may not host the new
// ones yet (UNKNOWN_TOPIC_OR_PARTITION for a second or so), which is no
// reason to fail a deploy gate. An error that persists is returned in the
// listing, and the caller fails on it. The others' errors are not waited
// on (a DLQ topic that does not exist yet answers the same error for good).
func listEnds(ctx context.Context, adm *kadm.Client, topic string, others ...string) (kadm.ListedOffsets, error) {
	deadline := time.Now().Add(endsRetry)
	for {
		ends, err := adm.ListEndOffsets(ctx, append([]string{topic}, others...)...)
		if err != nil {
			return nil, err
		}
		retriable := false
		for _, lo := range ends[topic] {
			retriable = retriable || (lo.Err != nil && kerr.IsRetriable(lo.Err))
		}
		if !retriable || time.Now().After(deadline) {
			return ends, nil
		}
		select {
		case <-ctx.Done():
			return ends, nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}
