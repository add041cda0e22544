package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/localserver"
	"github.com/tidemark/tidemark/lab/proc"
)

// ClockOffsetEnv makes a serve or apply process believe its wall clock is
// off by the given duration (a test-only switch of those stages).
const ClockOffsetEnv = "TIDEMARK_TEST_CLOCK_OFFSET"

// clockOffsets are beyond what the stages tolerate between their clock and
// the cache tier's, ahead and behind; each fault picks one.
var clockOffsets = []string{"2s", "-2s"}

// FaultRecord is one injected fault as the report shows it.
type FaultRecord struct {
	Kind     string        `json:"kind"`
	Target   string        `json:"target"`
	Planned  time.Duration `json:"planned_at"`
	Injected time.Time     `json:"injected"`
	Lifted   time.Time     `json:"lifted"`
	// Recovered is when the watermark age was next under RecoveredAge after
	// the fault was lifted (zero: not within the run).
	Recovered time.Time `json:"recovered,omitempty"`
	Error     string    `json:"error,omitempty"`

	// Unlocked is when the harness released a lock it held on the catalog
	// (source-stall, long-outage): the budget's judge allows for the reads
	// that waited on it (BudgetLimits.AllowedAtUnlock).
	Unlocked time.Time `json:"source_unlocked,omitzero"`

	// Back is when the read SLO's recovery ended (slo.go): the watermark
	// fresh, the hit ratio back and failures at their steady rate.
	Back time.Time `json:"back,omitzero"`
}

// RecoveredAge is the watermark age under which the pipeline counts as
// recovered from a fault.
const RecoveredAge = 5 * time.Second

// injector runs faults against the system; faults on the same target wait
// for each other, faults on different targets overlap.
type injector struct {
	sys  *system
	load *load

	mu    sync.Mutex
	rng   *rand.Rand
	locks map[string]*sync.Mutex
}

func newInjector(sys *system, l *load, seed int64) *injector {
	return &injector{sys: sys, load: l, rng: rand.New(rand.NewPCG(uint64(seed), 0x1e7)), locks: map[string]*sync.Mutex{}}
}

func (in *injector) intn(n int) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.rng.IntN(n)
}

// targetsOf lists what a fault holds, always in the same order (so two
// compound faults cannot wait for each other in a cycle).
func targetsOf(kind string) []string {
	switch kind {
	case FaultLongOutage:
		return []string{"capture", "postgres"}
	case FaultSyncStandbyStall:
		// Postgres too: a restart under it ended the stalled transaction
		// and the fault then tested nothing. The catalog too: the stalled
		// commit holds its row locks, and a fault's LOCK TABLE
		// (truncate-fast-clock) timed out behind it.
		return []string{"catalog", "postgres", "syncrep"}
	case FaultRedisLossNoApply:
		return []string{"apply", "redis"}
	case FaultPromotion:
		return []string{"capture", "postgres", "syncrep"}
	case FaultTruncateFastClock:
		return []string{"catalog"} // and "serve" while the clock is fast (it takes that itself)
	case FaultColdStart:
		// Postgres too: a restart under it ended the connection its items
		// are changed on, and the fault then tested nothing.
		return []string{"apply", "capture", "catalog", "postgres"}
	case FaultUnbumpedWrite, FaultBadVersionRow:
		return []string{"catalog"}
	case FaultPublicationGap, FaultTableRewrite:
		return []string{"catalog", "postgres"}
	case FaultCaptureStateLost, FaultSharedTopic:
		return []string{"capture", "catalog", "postgres"}
	case FaultRogueApplier, FaultSecondTable:
		return nil // each takes its target itself (apply, redis), only while its process runs
	case FaultServeRedisCut, FaultServeBudgetMismatch, FaultServeSecondPool, FaultServeSecondRedis:
		return []string{"readers", "serve"} // the cold burst's readers
	case FaultServeCutRedisRewind:
		return []string{"readers", "serve", "redis"}
	}
	return []string{targetOf(kind)}
}

func targetOf(kind string) string {
	switch kind {
	case FaultKillCapture, FaultStopCapture, FaultSlotDrop:
		return "capture"
	case FaultKillApply, FaultStopApply, FaultFutureHeartbeat:
		return "apply"
	case FaultMalformedHeartbeat:
		return "capture"
	case FaultSyncStandbyStall:
		return "syncrep"
	case FaultExpiredFloors:
		return "floors"
	case FaultSharedHTTPCache:
		return "http-cache"
	case FaultKillServe, FaultStopServe, FaultClockOffset:
		return "serve"
	case FaultPGRestart, FaultSourceStall:
		return "postgres"
	case FaultBrokerRestart:
		return "kafka"
	case FaultColdBurst:
		return "readers"
	}
	return "redis"
}

func (in *injector) lock(target string) func() {
	in.mu.Lock()
	l := in.locks[target]
	if l == nil {
		l = &sync.Mutex{}
		in.locks[target] = l
	}
	in.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// sleep holds a fault for d, or less if the run is ending.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// inject runs one fault to its end. ctx ending shortens the hold; the fault
// is always lifted.
func (in *injector) inject(ctx context.Context, f plannedFault) FaultRecord {
	for _, t := range targetsOf(f.Kind) {
		defer in.lock(t)()
	}
	rec := FaultRecord{Kind: f.Kind, Planned: f.At, Injected: time.Now()}
	var err error
	s := in.sys
	switch f.Kind {
	case FaultKillCapture:
		rec.Target, err = in.kill(ctx, s.captures, f.Hold)
	case FaultKillApply:
		rec.Target, err = in.kill(ctx, s.appliers, f.Hold)
	case FaultKillServe:
		rec.Target, err = in.kill(ctx, s.serves, f.Hold)
	case FaultStopCapture:
		rec.Target, err = in.pause(ctx, s.captures, f.Hold)
	case FaultStopApply:
		rec.Target, err = in.pause(ctx, s.appliers, f.Hold)
	case FaultStopServe:
		rec.Target, err = in.pause(ctx, s.serves, f.Hold)
	case FaultRedisRestart:
		rec.Target, err = in.redisRestart(ctx, false, f.Hold, nil)
	case FaultRedisSnapshot:
		rec.Target, err = in.redisRestart(ctx, true, f.Hold, nil)
	case FaultKillMaster:
		rec.Target, err = in.redisRestart(ctx, false, f.Hold, nil)
	case FaultRedisReadonly:
		rec.Target, err = in.redisReadonly(ctx, f.Hold)
	case FaultRedisHung:
		rec.Target, err = in.redisHung(ctx, f.Hold)
	case FaultReshard:
		rec.Target, err = in.reshard(ctx)
	case FaultPGRestart:
		rec.Target = "postgres"
		s.pg.Stop()
		err = s.pg.Start()
	case FaultSourceStall:
		rec.Target = s.cfg.Table.Name
		rec.Unlocked, err = in.stall(ctx, f.Hold, 10*time.Second)
	case FaultSlotDrop:
		rec.Target, err = s.slot, in.slotDrop(ctx, f.Hold)
	case FaultBrokerRestart:
		rec.Target = "kafka"
		s.broker.Kill()
		sleep(ctx, f.Hold)
		if err = s.broker.Start(); err == nil {
			err = waitTCP(context.WithoutCancel(ctx), s.brokers, 30*time.Second)
		}
	case FaultClockOffset:
		rec.Target, err = in.clockOffset(ctx, f.Hold)
	case FaultLongOutage:
		rec.Target = "both captures stopped, the source locked for the last 15s"
		rec.Unlocked, err = in.longOutage(ctx, f.Hold)
	case FaultRedisLossNoApply:
		// The snapshot is taken while the appliers run; they apply (and
		// commit) more before they go down; Redis comes back without it.
		rec.Target, err = in.redisRestart(ctx, true, f.Hold, func() {
			for _, p := range s.appliers {
				p.Kill()
			}
		})
		for _, p := range s.appliers {
			err = errors.Join(err, p.Start())
		}
	case FaultColdBurst:
		rec.Target = fmt.Sprintf("%g reads/s uniform", 3*s.cfg.SourceBudget)
		in.load.coldUntil.Store(time.Now().Add(f.Hold).UnixNano())
		sleep(ctx, f.Hold)
	case FaultFutureHeartbeat:
		rec.Target, err = in.futureHeartbeat(ctx, f.Hold)
	case FaultMalformedHeartbeat:
		rec.Target, err = in.malformedHeartbeat(ctx)
	case FaultTruncateFastClock:
		rec.Target, err = in.truncateFastClock(ctx, f.Hold)
	case FaultExpiredFloors:
		rec.Target, err = in.expiredFloors(ctx)
	case FaultSharedHTTPCache:
		rec.Target, err = in.sharedHTTPCache(ctx, f.Hold)
	case FaultSyncStandbyStall:
		rec.Target, err = in.syncStandbyStall(ctx, f.Hold)
	case FaultPromotion:
		rec.Target, err = in.promotion(ctx)
	case FaultColdStart:
		rec.Target, err = in.coldStart(ctx, f.Hold)
	case FaultUnbumpedWrite:
		rec.Target, err = in.unbumpedWrite(ctx, f.Hold)
	case FaultBadVersionRow:
		rec.Target, err = in.badVersionRow(ctx)
	case FaultRogueApplier:
		rec.Target, err = in.rogueApplier(ctx, f.Hold)
	case FaultSecondTable:
		rec.Target, err = in.secondTable(ctx, f.Hold)
	case FaultServeRedisCut:
		rec.Target, err = in.serveRedisCut(ctx, f.Hold)
	case FaultServeCutRedisRewind:
		rec.Target, err = in.serveCutRedisRewind(ctx, f.Hold)
	case FaultSharedTopic:
		rec.Target, err = in.sharedTopic(ctx, f.Hold)
	case FaultServeBudgetMismatch:
		rec.Target, err = in.serveBudgetMismatch(ctx, f.Hold)
	case FaultServeSecondPool:
		rec.Target, err = in.serveSecondPool(ctx, f.Hold)
	case FaultServeSecondRedis:
		rec.Target, err = in.serveSecondRedis(ctx, f.Hold)
	case FaultPublicationGap:
		rec.Target, err = in.publicationGap(ctx, f.Hold)
	case FaultTableRewrite:
		rec.Target, err = in.tableRewrite(ctx, f.Hold, false)
	case FaultCaptureStateLost:
		rec.Target, err = in.tableRewrite(ctx, f.Hold, true)
	default:
		err = fmt.Errorf("unknown fault kind %q", f.Kind)
	}
	rec.Lifted = time.Now()
	if err != nil {
		rec.Error = err.Error()
	}
	return rec
}

func (in *injector) kill(ctx context.Context, ps []*proc.Process, hold time.Duration) (string, error) {
	p := ps[in.intn(len(ps))]
	p.Kill()
	sleep(ctx, hold)
	return p.Name(), p.Start()
}

func (in *injector) pause(ctx context.Context, ps []*proc.Process, hold time.Duration) (string, error) {
	p := ps[in.intn(len(ps))]
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		return p.Name(), err
	}
	sleep(ctx, hold)
	return p.Name(), p.Signal(syscall.SIGCONT)
}

// clockOffset runs one serve process with a clock off by more than the
// stages tolerate, then restarts it with the true clock.
func (in *injector) clockOffset(ctx context.Context, hold time.Duration) (string, error) {
	p := in.sys.serves[in.intn(len(in.sys.serves))]
	env := ClockOffsetEnv + "=" + clockOffsets[in.intn(len(clockOffsets))]
	p.Kill()
	if err := p.Start(env); err != nil {
		return p.Name(), err
	}
	sleep(ctx, hold)
	p.Kill()
	return p.Name() + " " + env, p.Start()
}

// stall holds an exclusive lock on the catalog: writers and source reads
// queue behind it. unlocked is when the lock was released (zero if it was
// never taken).
func (in *injector) stall(ctx context.Context, hold, lockWait time.Duration) (unlocked time.Time, err error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hold+lockWait+5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, in.sys.dsn)
	if err != nil {
		return time.Time{}, err
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(cctx)
	if err != nil {
		return time.Time{}, err
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(cctx, fmt.Sprintf("SET LOCAL lock_timeout = '%dms'", lockWait.Milliseconds())); err != nil {
		return time.Time{}, err
	}
	if _, err := tx.Exec(cctx, "LOCK TABLE "+in.sys.cfg.Table.Qualified()+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		return time.Time{}, err
	}
	sleep(ctx, hold)
	if err := tx.Rollback(cctx); err != nil {
		conn.Close(context.Background()) // the lock goes with the session
		return time.Now(), err
	}
	return time.Now(), nil
}

// longOutage stops both captures for longer than the bound, so the
// watermark stops and every cached entry reaches its hard deadline, and
// locks the catalog for the last 15 s, so the refreshes those deadlines
// need cannot be made: the answers must be 503s, not old values.
func (in *injector) longOutage(ctx context.Context, hold time.Duration) (unlocked time.Time, err error) {
	var errs []error
	for _, p := range in.sys.captures {
		errs = append(errs, p.Signal(syscall.SIGSTOP))
	}
	const locked = 15 * time.Second
	sleep(ctx, hold-locked)
	// A synchronous-standby stall may hold commits (and their locks) for
	// up to FloorTTL + 6 s: the lock waits that out rather than give up.
	unlocked, err = in.stall(ctx, locked, ChaosFloorTTL+10*time.Second)
	errs = append(errs, err)
	for _, p := range in.sys.captures {
		errs = append(errs, p.Signal(syscall.SIGCONT))
	}
	return unlocked, errors.Join(errs...)
}

// slotDrop kills both captures, drops the replication slot (every change
// meanwhile is lost to the stream), and starts them again: capture must
// notice the gap.
func (in *injector) slotDrop(ctx context.Context, hold time.Duration) error {
	s := in.sys
	for _, p := range s.captures {
		p.Kill()
	}
	err := in.dropSlot(ctx)
	sleep(ctx, hold)
	for i, p := range s.captures {
		if serr := p.Start(); serr != nil {
			err = errors.Join(err, serr)
		}
		if i == 0 {
			time.Sleep(500 * time.Millisecond) // the first one recreates the slot
		}
	}
	return err
}

// dropSlot drops the replication slot, ending the walsender that holds it.
func (in *injector) dropSlot(ctx context.Context) error {
	s := in.sys
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var err error
	for cctx.Err() == nil {
		if _, err = s.pool.Exec(cctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, s.slot); err == nil {
			if _, err = s.pool.Exec(cctx, `SELECT pg_drop_replication_slot($1)`, s.slot); err == nil {
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// node is a client of Redis server i alone (not the Cluster), for the
// faults aimed at one server; built like every other client.
func (in *injector) node(i int) *redis.Client {
	c, err := cache.OpenRedis(cache.RedisConfig{URL: in.sys.redis[i].URL() + "?max_retries=-1&dial_timeout=1s&read_timeout=5s", Mode: cache.ModeStandalone}, nil)
	if err != nil { // the URL is the lab's own: a bad one is a bug
		panic(fmt.Sprintf("chaos: redis node %d: %v", i, err))
	}
	return c.(*redis.Client)
}

// redisRestart restarts one Redis server without persistence (empty), or,
// with snapshot, from a snapshot taken hold earlier. In a cluster the
// restarted master comes back as a new, empty node that takes over the
// slots the old one served. beforeKill, if set, runs just before the kill.
func (in *injector) redisRestart(ctx context.Context, snapshot bool, hold time.Duration, beforeKill func()) (string, error) {
	s := in.sys
	i := in.intn(len(s.redis))
	r := s.redis[i]
	dump := filepath.Join(r.Dir(), "dump.rdb")
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 90*time.Second)
	defer cancel()
	c := in.node(i)
	defer c.Close()
	var id string
	var slots [][2]int
	if s.cfg.Cluster {
		var err error
		if id, slots, err = clusterSelf(cctx, c); err != nil {
			return r.Addr, err
		}
	}
	name := r.Addr
	if snapshot {
		name += " (snapshot " + hold.Round(time.Second).String() + " old)"
		if err := c.Save(cctx).Err(); err != nil {
			return name, fmt.Errorf("redis SAVE: %w", err)
		}
		sleep(ctx, hold)
	} else {
		os.Remove(dump)
		if s.cfg.Cluster {
			sleep(ctx, hold) // a killed master stays down for a while
		}
	}
	if beforeKill != nil {
		beforeKill()
	}
	r.Kill()
	err := r.Start()
	os.Remove(dump) // the next restart without persistence starts empty
	if err != nil {
		return name, err
	}
	if s.cfg.Cluster {
		err = in.rejoin(cctx, i, id, slots)
	}
	return name, err
}

// clusterSelf is the node's id and the slot ranges it serves.
func clusterSelf(ctx context.Context, c *redis.Client) (string, [][2]int, error) {
	out, err := c.ClusterNodes(ctx).Result()
	if err != nil {
		return "", nil, err
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.Contains(f[2], "myself") {
			continue
		}
		var slots [][2]int
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue // a migration in progress
			}
			lo, hi, ok := strings.Cut(r, "-")
			a, _ := strconv.Atoi(lo)
			b := a
			if ok {
				b, _ = strconv.Atoi(hi)
			}
			slots = append(slots, [2]int{a, b})
		}
		return f[0], slots, nil
	}
	return "", nil, errors.New("redis: CLUSTER NODES has no myself line")
}

// rejoin makes restarted node i (a new node id) serve the old node's slots.
func (in *injector) rejoin(ctx context.Context, i int, oldID string, slots [][2]int) error {
	s := in.sys
	c := in.node(i)
	defer c.Close()
	for j := range s.redis {
		if j == i {
			continue
		}
		o := in.node(j)
		o.ClusterForget(ctx, oldID) // may already be gone
		o.Close()
	}
	// A node restored from a snapshot has claimed the slots it has keys for
	// by itself: add the rest in one command.
	_, own, err := clusterSelf(ctx, c)
	if err != nil {
		return err
	}
	has := map[int]bool{}
	for _, r := range own {
		for slot := r[0]; slot <= r[1]; slot++ {
			has[slot] = true
		}
	}
	var missing []int
	for _, r := range slots {
		for slot := r[0]; slot <= r[1]; slot++ {
			if !has[slot] {
				missing = append(missing, slot)
			}
		}
	}
	if len(missing) > 0 {
		if err := c.ClusterAddSlots(ctx, missing...).Err(); err != nil {
			return fmt.Errorf("redis cluster addslots: %w", err)
		}
	}
	other := s.redis[(i+1)%len(s.redis)]
	if err := c.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(other.Port)).Err(); err != nil {
		return fmt.Errorf("redis cluster meet: %w", err)
	}
	return localserver.WaitClusterReady(ctx, s.redis)
}

// redisReadonly makes every master refuse writes (it has no replicas, so
// min-replicas-to-write 1 cannot be met).
func (in *injector) redisReadonly(ctx context.Context, hold time.Duration) (string, error) { //nolint:unparam // every injector returns (target, error)
	cctx := context.WithoutCancel(ctx)
	set := func(v string) error {
		var errs []error
		for i := range in.sys.redis {
			c := in.node(i)
			errs = append(errs, c.ConfigSet(cctx, "min-replicas-to-write", v).Err())
			c.Close()
		}
		return errors.Join(errs...)
	}
	if err := set("1"); err != nil {
		_ = set("0") // undo; the error returned is the first one
		return "all masters", err
	}
	sleep(ctx, hold)
	return "all masters", set("0")
}

func (in *injector) redisHung(ctx context.Context, hold time.Duration) (string, error) {
	r := in.sys.redis[in.intn(len(in.sys.redis))]
	pid := r.Pid()
	if pid == 0 {
		return r.Addr, errors.New("redis not running")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return r.Addr, err
	}
	sleep(ctx, hold)
	return r.Addr, syscall.Kill(pid, syscall.SIGCONT)
}

// reshard moves 200 slots between two masters with redis-cli while the
// load runs.
func (in *injector) reshard(ctx context.Context) (string, error) {
	s := in.sys
	type master struct {
		id    string
		addr  string
		slots int
	}
	var ms []master
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	for i := range s.redis {
		c := in.node(i)
		id, slots, err := clusterSelf(cctx, c)
		c.Close()
		if err != nil {
			return "", err
		}
		n := 0
		for _, r := range slots {
			n += r[1] - r[0] + 1
		}
		ms = append(ms, master{id, s.redis[i].Addr, n})
	}
	from := 0
	for i := range ms {
		if ms[i].slots > ms[from].slots {
			from = i
		}
	}
	to := (from + 1 + in.intn(len(ms)-1)) % len(ms)
	target := fmt.Sprintf("200 slots %s -> %s", ms[from].addr, ms[to].addr)
	out, err := exec.CommandContext(cctx, "redis-cli", "--cluster", "reshard", ms[from].addr,
		"--cluster-from", ms[from].id, "--cluster-to", ms[to].id, "--cluster-slots", "200", "--cluster-yes").CombinedOutput()
	if err != nil {
		return target, fmt.Errorf("redis-cli --cluster reshard: %v: %s", err, tail(string(out), 500))
	}
	return target, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
