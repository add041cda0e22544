package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/catalog"
	"github.com/tidemark/tidemark/lab/localserver"
	"github.com/tidemark/tidemark/lab/proc"
	"github.com/tidemark/tidemark/lab/seed"
	"github.com/tidemark/tidemark/promise"
	"github.com/tidemark/tidemark/schema"
)

// system is the deployment under test: private Postgres, Redis (one server
// or a 3-master cluster) and Kafka (an embedded broker process, or external
// brokers), and two of each stage as separate processes of the binary.
type system struct {
	cfg Config
	log *slog.Logger
	dir string

	pg       *localserver.Postgres
	standby  *localserver.Postgres // a streaming standby, when the run may promote it
	dsn      string
	pool     *pgxpool.Pool
	redis    []*localserver.Redis
	redisURL string
	rdb      redis.UniversalClient
	// proxies: one per serve process in front of the Redis server, so one
	// can be cut off alone; only when FaultServeRedisCut is scheduled.
	proxies []*proxyStage

	broker  *proc.Process // nil with external brokers
	brokers string
	// kafkaArgs are the stages' flags reaching brokers (KafkaConn's TLS and
	// SASL with external ones).
	kafkaArgs []string
	topic     string
	group     string
	slot      string

	captures, appliers, serves []*proc.Process
	apiBases                   []string
	applyMetrics, serveMetrics []string

	tenants []string
	keys    map[string]string // tenant -> API key

	observedNS atomic.Pointer[string] // set by a namespace upgrade (upgrade.go)
}

const (
	chaosDB     = "catalog"
	namespace   = promise.Namespace
	partitions  = 6
	stageGrace  = 10 * time.Second
	readyWithin = 2 * time.Minute
)

func addr() (string, error) {
	p, err := localserver.FreePort()
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(p), nil
}

func startSystem(ctx context.Context, cfg Config, dir string, log *slog.Logger) (*system, error) {
	s := &system{cfg: cfg, log: log, dir: dir, keys: map[string]string{}}
	for i := 1; i <= cfg.Tenants; i++ {
		s.tenants = append(s.tenants, fmt.Sprintf("tenant%d", i))
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	s.topic, s.group, s.slot = "chaos."+run, "chaos-"+run, "chaos_"+run
	steps := []struct {
		what string
		fn   func(context.Context) error
	}{
		{"postgres", s.startPostgres},
		{"standby", s.startStandby},
		{"redis", s.startRedis},
		{"kafka", s.startKafka},
		{"stages", s.startStages},
		{"pipeline ready", s.waitReady},
	}
	for _, st := range steps {
		log.Info("chaos: starting", "step", st.what)
		if err := st.fn(ctx); err != nil {
			s.close()
			return nil, fmt.Errorf("chaos: start %s: %w", st.what, err)
		}
	}
	return s, nil
}

// historyDDL is the harness's own record of the source: every version of
// every row of t, written by a trigger in the writing transaction, so it
// commits (and gets its commit timestamp) with the change or not at all.
// Its state is 'deleted' for a tombstone, whatever t calls one.
func historyDDL(t catalog.Table) string {
	return fmt.Sprintf(historyDDLFormat, col(t.TenantColumn), col(t.ItemColumn), col(t.VersionColumn), t.DeletedSQL(), t.Qualified())
}

const historyDDLFormat = `
CREATE SCHEMA chaos;
CREATE TABLE chaos.history (
    id        bigserial PRIMARY KEY,
    xid       xid8   NOT NULL DEFAULT pg_current_xact_id(),
    tenant_id text   NOT NULL,
    item_id   text   NOT NULL,
    version   bigint NOT NULL,
    state     text   NOT NULL
);
CREATE INDEX history_xid ON chaos.history (xid);
CREATE FUNCTION chaos.record() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos.history (tenant_id, item_id, version, state)
    SELECT r.%[1]s, r.%[2]s, r.%[3]s, CASE WHEN %[4]s THEN 'deleted' ELSE 'active' END
    FROM (SELECT NEW.*) r;
    RETURN NULL;
END $$;
CREATE TRIGGER chaos_history AFTER INSERT OR UPDATE ON %[5]s
    FOR EACH ROW EXECUTE FUNCTION chaos.record();
`

// col is a column name quoted for SQL.
func col(name string) string { return pgx.Identifier{name}.Sanitize() }

// foreignDDL creates an operator's own catalog table as the mapping
// describes it (one jsonb payload column), to be adopted.
func foreignDDL(t catalog.Table) string {
	schemaName, _, _ := catalog.SplitName(t.Name)
	cols := []string{col(t.TenantColumn) + " text NOT NULL", col(t.ItemColumn) + " text NOT NULL",
		col(t.VersionColumn) + " bigint NOT NULL DEFAULT 1", col(t.StateColumn) + " text NOT NULL DEFAULT " + catalog.Literal(t.ActiveState),
		col(t.Payload[0]) + " jsonb"}
	if t.UpdatedAtColumn != "" {
		cols = append(cols, col(t.UpdatedAtColumn)+" timestamptz NOT NULL DEFAULT now()")
	}
	cols = append(cols, "PRIMARY KEY ("+col(t.TenantColumn)+", "+col(t.ItemColumn)+")")
	return "CREATE SCHEMA IF NOT EXISTS " + col(schemaName) + ";\nCREATE TABLE " + t.Qualified() + " (\n    " + strings.Join(cols, ",\n    ") + "\n)"
}

func (s *system) startPostgres(ctx context.Context) error {
	pg, err := localserver.NewPostgres(localserver.PostgresConfig{Dir: filepath.Join(s.dir, "postgres"), Ephemeral: true, Conf: pgConf()})
	if err != nil {
		return err
	}
	s.pg = pg
	conn, err := pgx.Connect(ctx, pg.DSN("postgres"))
	if err != nil {
		return err
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+chaosDB)
	conn.Close(context.Background())
	if err != nil {
		return err
	}
	s.dsn = pg.DSN(chaosDB)
	if s.cfg.foreign() {
		// The operator's own table, then `tidemark adopt` on it (which
		// also creates tidemark's own tables).
		conn, err := pgx.Connect(ctx, s.dsn)
		if err != nil {
			return err
		}
		_, err = conn.Exec(ctx, foreignDDL(s.cfg.Table))
		conn.Close(context.Background())
		if err != nil {
			return fmt.Errorf("create %s: %w", s.cfg.Table.Name, err)
		}
		if out, err := exec.CommandContext(ctx, s.cfg.stageBinary(), append([]string{"adopt", "--pg", s.dsn}, s.cfg.tableFlags()...)...).CombinedOutput(); err != nil {
			return fmt.Errorf("tidemark adopt: %v\n%s", err, out)
		}
	} else if out, err := exec.CommandContext(ctx, s.cfg.stageBinary(), "migrate", "--pg", s.dsn).CombinedOutput(); err != nil {
		return fmt.Errorf("tidemark migrate: %v\n%s", err, out)
	}
	pcfg, err := pgxpool.ParseConfig(s.dsn)
	if err != nil {
		return err
	}
	pcfg.MaxConns = 16
	if s.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return err
	}
	// The source's own count of its reads, for the budget's verdict.
	if _, err := s.pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		return fmt.Errorf("pg_stat_statements: %w", err)
	}
	if _, err := s.pool.Exec(ctx, historyDDL(s.cfg.Table)); err != nil {
		return fmt.Errorf("history table: %w", err)
	}
	for _, t := range s.tenants {
		if err := (seed.Items{Table: s.cfg.Table, Tenant: t, Prefix: "item-", Pad: 5, First: 1, Count: s.cfg.Items,
			Display: "jsonb_build_object('tenant', t, 'item', id, 'v', 1)"}).Insert(ctx, s.pool); err != nil {
			return fmt.Errorf("seed items: %w", err)
		}
		out, err := exec.CommandContext(ctx, s.cfg.stageBinary(), "apikey", "create", "--pg", s.dsn, "--tenant", t).Output()
		if err != nil {
			return fmt.Errorf("tidemark apikey create: %w", err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		s.keys[t] = strings.TrimSpace(lines[len(lines)-1])
	}
	return nil
}

func (s *system) startRedis(ctx context.Context) error {
	n := 1
	if s.cfg.Cluster {
		n = 3
	}
	var addrs []string
	for i := 0; i < n; i++ {
		r, err := localserver.NewRedis(localserver.RedisConfig{Dir: filepath.Join(s.dir, fmt.Sprintf("redis%d", i)), Cluster: s.cfg.Cluster})
		if err != nil {
			return err
		}
		s.redis = append(s.redis, r)
		addrs = append(addrs, r.Addr)
	}
	if s.cfg.Cluster {
		fctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := localserver.FormCluster(fctx, s.redis); err != nil {
			return err
		}
		s.redisURL = "redis://" + strings.Join(addrs, ",")
	} else {
		s.redisURL = s.redis[0].URL()
	}
	// The checker's own client, built as every process builds its own:
	// short timeouts and one retry, so a faulted server is seen at once.
	mode := cache.ModeStandalone
	if s.cfg.Cluster {
		mode = cache.ModeCluster
	}
	var err error
	s.rdb, err = cache.OpenRedis(cache.RedisConfig{URL: s.redisURL + "?max_retries=1&dial_timeout=1s&read_timeout=1s", Mode: mode}, nil)
	return err
}

func (s *system) startKafka(ctx context.Context) error {
	if len(s.cfg.Kafka) > 0 {
		s.brokers = strings.Join(s.cfg.Kafka, ",")
		conn := s.cfg.KafkaConn
		if conn.SASLPassword != "" { // to the stages as a file, never in their argv
			f := filepath.Join(s.dir, "kafka-sasl-password")
			if err := os.WriteFile(f, []byte(conn.SASLPassword), 0o600); err != nil {
				return err
			}
			conn.SASLPassword, conn.SASLPasswordFile = "", f
		}
		s.kafkaArgs = proc.KafkaArgs(s.cfg.Kafka, conn)
		return nil
	}
	port, err := localserver.FreePort()
	if err != nil {
		return err
	}
	s.brokers = "127.0.0.1:" + strconv.Itoa(port)
	s.kafkaArgs = []string{"--kafka", s.brokers}
	s.broker = s.stage("kafka", "kafka", "--data-dir", filepath.Join(s.dir, "kafka"), "--port", strconv.Itoa(port),
		"--partitions", strconv.Itoa(partitions))
	if err := s.broker.Start(); err != nil {
		return err
	}
	return waitTCP(ctx, s.brokers, 30*time.Second)
}

func waitTCP(ctx context.Context, a string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("tcp", a, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not listening after %s: %w", a, within, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *system) stage(name string, args ...string) *proc.Process {
	bin := s.cfg.stageBinary() // the old build of a rolling upgrade (upgrade.go); the embedded broker is the lab's
	if name == "kafka" {
		bin = s.cfg.LabBinary
	}
	return proc.New(proc.Config{Name: name, Bin: bin, Args: args, Env: s.cfg.StageEnv, Log: filepath.Join(s.dir, name+".log"), Group: true})
}

// labStage is a process of the lab binary (the harness's own helpers).
func (s *system) labStage(name string, args ...string) *proc.Process {
	return proc.New(proc.Config{Name: name, Bin: s.cfg.LabBinary, Args: args, Log: filepath.Join(s.dir, name+".log"), Group: true})
}

func (s *system) startStages(ctx context.Context) error {
	for i := 0; i < 2; i++ {
		m, err := addr()
		if err != nil {
			return err
		}
		args := append(append([]string{"capture", "--pg", s.dsn}, s.kafkaArgs...), "--topic", s.topic, "--slot", s.slot,
			"--partitions", strconv.Itoa(partitions), "--metrics-addr", m, "--shutdown-timeout", "5s")
		s.captures = append(s.captures, s.stage(fmt.Sprintf("capture%d", i+1), append(args, s.cfg.tableFlags()...)...))
	}
	for i := 0; i < 2; i++ {
		m, err := addr()
		if err != nil {
			return err
		}
		s.applyMetrics = append(s.applyMetrics, "http://"+m+"/metrics")
		s.appliers = append(s.appliers, s.stage(fmt.Sprintf("apply%d", i+1), append(append([]string{"apply"}, s.kafkaArgs...), "--redis", s.redisURL,
			"--topic", s.topic, "--group", s.group, "--session-timeout", "2s", "--metrics-addr", m,
			"--cache-floor-ttl", ChaosFloorTTL.String())...))
	}
	lim := s.cfg.Limits()
	rate := func(class string) string { return strconv.FormatFloat(lim.Classes[class], 'f', -1, 64) }
	serveRedis := []string{s.redisURL, s.redisURL}
	if s.cfg.serveProxies() {
		var err error
		if serveRedis, err = s.serveProxies(ctx, 2); err != nil {
			return err
		}
	}
	for i := 0; i < 2; i++ {
		a, err := addr()
		if err != nil {
			return err
		}
		m, err := addr()
		if err != nil {
			return err
		}
		s.apiBases = append(s.apiBases, "http://"+a)
		s.serveMetrics = append(s.serveMetrics, "http://"+m+"/metrics")
		s.serves = append(s.serves, s.stage(fmt.Sprintf("serve%d", i+1), append([]string{"serve", "--pg", s.dsn, "--redis", serveRedis[i],
			// While Redis cannot be asked, serve meters itself at the class
			// rate divided by the live serve processes (no flag needed).
			"--addr", a, "--metrics-addr", m, "--source-foreground-rate", rate(ClassForeground), "--source-background-rate", rate(ClassBackground),
			"--source-ryw-rate", rate(ClassReadYourWrites), "--cache-floor-ttl", ChaosFloorTTL.String()}, s.cfg.tableFlags()...)...))
	}
	// The first capture starts alone so it creates the slot and becomes the
	// active one; the second waits as the passive standby.
	if err := s.captures[0].Start(); err != nil {
		return err
	}
	for _, p := range append(append(s.captures[1:], s.appliers...), s.serves...) {
		if err := p.Start(); err != nil {
			return err
		}
	}
	return nil
}

// waitReady waits until the watermark is known and both serve processes
// answer.
func (s *system) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(readyWithin)
	var last error
	for time.Now().Before(deadline) {
		last = s.ready(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("not ready after %s: %w (logs in %s)", readyWithin, last, s.dir)
}

func (s *system) ready(ctx context.Context) error {
	if _, err := s.watermarkAge(ctx); err != nil {
		return err
	}
	for _, base := range s.apiBases {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/catalog/items/item-00001", nil)
		req.Header.Set("Authorization", "Bearer "+s.keys[s.tenants[0]])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s answered %d", base, resp.StatusCode)
		}
	}
	return nil
}

var errNoWatermark = errors.New("watermark not known yet")

// watermarkAge reads the freshness watermark the appliers publish (the
// oldest partition's) straight from the cache tier.
func (s *system) watermarkAge(ctx context.Context) (time.Duration, error) {
	return s.watermarkAgeOf(ctx, s.watermarkNS())
}

func (s *system) watermarkAgeOf(ctx context.Context, ns string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	h, err := s.rdb.HGetAll(ctx, schema.WatermarkKey(ns)).Result()
	if err != nil {
		return 0, err
	}
	n, _ := strconv.Atoi(h[schema.FieldPartitions])
	if n == 0 {
		return 0, errNoWatermark
	}
	var w int64 = -1
	for p := int32(0); p < int32(n); p++ {
		ms, err := strconv.ParseInt(h[schema.WatermarkField(p)], 10, 64)
		if err != nil {
			return 0, errNoWatermark
		}
		if w < 0 || ms < w {
			w = ms
		}
	}
	return time.Since(time.UnixMilli(w)), nil
}

// stages is every stage process.
func (s *system) stages() []*proc.Process {
	return append(append(append([]*proc.Process(nil), s.captures...), s.appliers...), s.serves...)
}

// close stops everything in pipeline order and the servers last.
func (s *system) close() {
	for _, p := range s.serves {
		p.Stop(stageGrace)
	}
	for _, p := range s.captures {
		p.Stop(stageGrace)
	}
	for _, p := range s.appliers {
		p.Stop(stageGrace)
	}
	if s.broker != nil {
		s.broker.Stop(stageGrace)
	}
	if s.rdb != nil {
		s.rdb.Close()
	}
	for _, p := range s.proxies {
		p.proc.Stop(stageGrace)
	}
	for _, r := range s.redis {
		r.Kill()
	}
	if s.pool != nil {
		s.pool.Close()
	}
	if s.standby != nil {
		s.standby.Stop()
	}
	if s.pg != nil {
		s.pg.Stop()
	}
}
