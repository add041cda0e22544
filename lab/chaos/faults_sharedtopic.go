package chaos

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/lab/proc"
)

// FaultSharedTopic: a second deployment, on a database of its own, left on
// this deployment's topic (two Helm releases on the default topic of one
// Kafka cluster): its capture is started with the run's --topic and a slot
// of its own. While both captures run, the appliers hold the watermark
// (applier/sources.go); then this deployment's captures are killed, items
// of the fault's own, read into the cache first, change one version up,
// and the items are read through every serve process past the bound. The
// appliers forget a silent source after three heartbeats and raise the
// watermark on the other deployment's markers: a serve process must trust
// a watermark only of its own source (cache/source.go), or it extends the
// values the uncaptured changes replaced: KindStale.
const FaultSharedTopic = "shared-topic"

// sharedDB is FaultSharedTopic's second deployment's database and slot.
const sharedDB = "chaos_shared"

func (in *injector) sharedTopic(ctx context.Context, hold time.Duration) (string, error) {
	s := in.sys
	t := s.cfg.Table
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	items, cached, err := in.cachedOwnItems(ctx, cctx, "shared")
	if err != nil {
		return "", err
	}
	conn, err := in.pgConn(cctx)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())

	second, err := in.startSharedDeployment(cctx, conn)
	if second != nil {
		defer func() {
			second.Kill()
			// Its slot would hold the server's WAL for the rest of the run.
			_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_drop_replication_slot($1) FROM pg_replication_slots WHERE slot_name = $1", sharedDB)
			_, _ = conn.Exec(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+sharedDB+" WITH (FORCE)")
		}()
	}
	if err != nil {
		return "", err
	}
	// Both captures' markers reach the appliers for a few heartbeats.
	sleep(ctx, 5*time.Second)
	for _, p := range s.captures {
		p.Kill()
	}
	n, uerr := bumpItems(cctx, conn, t, items)
	changed := time.Now()
	if uerr != nil {
		return "", errors.Join(fmt.Errorf("change the fault's items: %w", uerr), in.startCaptures())
	}
	start := time.Now()
	at := make([]time.Time, len(items))
	for i := range at {
		at[i] = changed
	}
	left := in.readPastBound(ctx, items, at, hold)
	second.Kill()
	err = in.startCaptures()
	what := fmt.Sprintf("a second deployment's capture on database %s and this topic, then the captures killed, %d items changed (%d of %d answered from the cache before), read for %s, captures started",
		sharedDB, n, cached, len(items), time.Since(start).Round(time.Second))
	if left > 0 {
		what += fmt.Sprintf("; %d of them %s", left, neverJudged)
	}
	return what, err
}

// startSharedDeployment creates the second deployment's database (migrated
// by `tidemark migrate`, as its release would) and starts its capture on
// the run's topic, with a slot of its own.
func (in *injector) startSharedDeployment(ctx context.Context, conn *pgx.Conn) (*proc.Process, error) {
	s := in.sys
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+sharedDB+" WITH (FORCE)"); err != nil {
		return nil, fmt.Errorf("drop %s: %w", sharedDB, err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+sharedDB); err != nil {
		return nil, fmt.Errorf("create %s: %w", sharedDB, err)
	}
	dsn := s.pg.DSN(sharedDB)
	if out, err := exec.CommandContext(ctx, s.cfg.stageBinary(), "migrate", "--pg", dsn).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("tidemark migrate %s: %v\n%s", sharedDB, err, out)
	}
	m, err := addr()
	if err != nil {
		return nil, err
	}
	args := append(append([]string{"capture", "--pg", dsn}, s.kafkaArgs...), "--topic", s.topic, "--slot", sharedDB,
		"--partitions", strconv.Itoa(partitions), "--metrics-addr", m, "--shutdown-timeout", "5s")
	p := s.stage(fmt.Sprintf("capture-shared-%d", identityRuns.Add(1)), args...)
	if err := p.Start(); err != nil {
		return p, fmt.Errorf("start the second deployment's capture: %w", err)
	}
	// Ready: it streams (and sends markers) once its slot exists.
	if err := waitReady(ctx, p, time.Minute, ""); err != nil {
		return p, fmt.Errorf("the second deployment's capture: %w", err)
	}
	return p, nil
}
