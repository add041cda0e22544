package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark/tidemark/catalog"
)

// The kinds of issue 36: one deployment's identity (namespace, table
// mapping, consumer group) broken by a plain operator mistake.
const (
	// FaultRogueApplier: a `tidemark apply` of another namespace started
	// with the deployment's consumer group (the old default group) while
	// items of the fault's own change, then killed. The applier must
	// refuse a group whose offsets were committed for another namespace
	// (applier/group.go). Otherwise it takes partitions, applies their
	// invalidations to its own namespace and commits past them; the
	// deployment's appliers resume from those offsets, the watermark
	// extends the values read before the change, and they are served past
	// the bound: KindStale.
	FaultRogueApplier = "rogue-applier"
	// FaultSecondTable: a reader of a second table (`tidemark serve
	// --table shop.offers`, same namespace) started during the run and
	// asked for items whose ids the catalog table has too, then the
	// catalog's serve processes asked for them. The second reader must be
	// refused the namespace, which is bound to the catalog table's mapping
	// (cache.ClaimIdentity); otherwise it fills the catalog's keys with its
	// rows, and the catalog's readers serve them: KindForeignRow.
	FaultSecondTable = "second-table-reader"
)

// rogueNamespace is the rogue applier's namespace: not the run's, nor a
// namespace upgrade's (which runs no identity kind).
const rogueNamespace = "rogue"

// identityItems per tenant, of each fault's own; identityRuns numbers them
// within a run.
const identityItems = 20

var identityRuns atomic.Int64

// watermarkCaughtUp is the watermark age from which the rogue applier's
// items are read again (under the cache tier's soft lifetime, 3-5 s).
const watermarkCaughtUp = 1500 * time.Millisecond

// rogueAssignedWithin bounds the wait for the rogue applier to be assigned
// partitions (a rebalance of the group with a 2 s session timeout).
const rogueAssignedWithin = 20 * time.Second

// secondReadyWithin bounds the wait for the second table's reader to be
// ready or to exit.
const secondReadyWithin = 30 * time.Second

// insertOwnItems inserts identityItems per tenant named prefix-<i> into the
// run's table at version 1, reads them into the cache through both serve
// processes once their inserts' invalidations had time to arrive, and
// returns them.
func (in *injector) insertOwnItems(ctx context.Context, prefix string) ([]itemKey, error) {
	s := in.sys
	t := s.cfg.Table
	conn, err := in.pgConn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	var items []itemKey
	for _, tenant := range s.tenants {
		for i := range identityItems {
			k := itemKey{tenant, fmt.Sprintf("%s-%d", prefix, i)}
			if _, err := conn.Exec(ctx, fmt.Sprintf("INSERT INTO %s (%s, %s, %s, %s, %s) VALUES ($1, $2, 1, %s, jsonb_build_object('tenant', $1::text, 'item', $2::text, 'v', 1))",
				t.Qualified(), col(t.TenantColumn), col(t.ItemColumn), col(t.VersionColumn), col(t.StateColumn), col(t.Payload[0]), litActive(t.ActiveState)),
				k.tenant, k.item); err != nil {
				return nil, fmt.Errorf("insert the fault's items: %w", err)
			}
			items = append(items, k)
		}
	}
	return items, nil
}

// cachedOwnItems inserts items of a fault's own (insertOwnItems), lets
// their invalidations arrive and reads them until each was answered from
// the cache (cacheAll), which it returns with how many were.
func (in *injector) cachedOwnItems(ctx, cctx context.Context, prefix string) ([]itemKey, int, error) {
	items, err := in.insertOwnItems(cctx, fmt.Sprintf("%s-%d", prefix, identityRuns.Add(1)))
	if err != nil {
		return nil, 0, err
	}
	sleep(ctx, 2*time.Second)
	return items, in.cacheAll(cctx, items), nil
}

// readOwn reads items once each through the catalog's serve processes
// (recorded for the checker) and returns the answers.
func (in *injector) readOwn(ctx context.Context, items []itemKey) []Answer {
	out := make([]Answer, len(items))
	var wg sync.WaitGroup
	for i, k := range items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], _ = in.load.getOn(ctx, i%len(in.sys.serves), k.tenant, k.item, 0, false)
		}()
	}
	wg.Wait()
	return out
}

// rogueApplier runs the fault; hold is how long the rogue applier stays in
// the group after the change.
func (in *injector) rogueApplier(ctx context.Context, hold time.Duration) (string, error) {
	s := in.sys
	t := s.cfg.Table
	bound := in.load.rec.checker.Bound
	readFor := bound + 5*time.Second // past the bound after the change
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readFor+rogueAssignedWithin+2*time.Minute)
	defer cancel()
	n := identityRuns.Add(1)
	items, err := in.insertOwnItems(cctx, fmt.Sprintf("rogue-%d", n))
	if err != nil {
		return "", err
	}
	sleep(ctx, 2*time.Second) // the inserts' invalidations arrive; then the items are cached
	in.cacheAll(cctx, items)

	// The rogue: the deployment's applier as it runs now (its topic and
	// group, after a cold start too), on another namespace and its own
	// metrics address. The apply target is held while it runs, so no
	// other fault kills or restarts the deployment's appliers meanwhile.
	unlock := in.lock("apply")
	locked := true
	defer func() {
		if locked {
			unlock()
		}
	}()
	m, err := addr()
	if err != nil {
		return "", err
	}
	base := s.appliers[0].Config()
	args := setArg(setArg(slices.Clone(base.Args), "--namespace", rogueNamespace), "--metrics-addr", m)
	group := argOf(args, "--group")
	rogue := s.stage(fmt.Sprintf("apply-rogue%d", n), args...)
	if err := rogue.Start(); err != nil {
		return "", err
	}
	defer rogue.Kill()
	started := time.Now()
	var assigned string
	waitFor(cctx, rogueAssignedWithin, func() bool {
		assigned = assignedPartitions(rogue.Output())
		return assigned != "" || rogue.Exited()
	})
	what := fmt.Sprintf("apply --namespace %s --group %s", rogueNamespace, group)
	switch {
	case rogue.Exited():
		what += fmt.Sprintf(" refused at start (exit %d after %s: %s)", rogue.ExitCode(), time.Since(started).Round(100*time.Millisecond),
			lastLineWith(rogue.Output(), "namespace"))
	case assigned != "":
		what += fmt.Sprintf(" assigned partitions %s %s after its start", assigned, time.Since(started).Round(100*time.Millisecond))
	default:
		what += fmt.Sprintf(" neither refused nor assigned partitions within %s", rogueAssignedWithin)
	}

	// The change: every item one version up, while the rogue is in the group.
	conn, err := in.pgConn(cctx)
	if err != nil {
		return what, err
	}
	defer conn.Close(context.Background())
	ver, payload := col(t.VersionColumn), col(t.Payload[0])
	if _, err := conn.Exec(cctx, fmt.Sprintf("UPDATE %s SET %s = %s + 1, %s = jsonb_build_object('tenant', %s, 'item', %s, 'v', %s + 1) WHERE %s LIKE $1",
		t.Qualified(), ver, ver, payload, col(t.TenantColumn), col(t.ItemColumn), ver, col(t.ItemColumn)), fmt.Sprintf("rogue-%d-%%", n)); err != nil {
		return what, fmt.Errorf("change the fault's items: %w", err)
	}
	changed := time.Now()
	// The rogue stays for hold, then is killed (kill -9: it commits
	// nothing more); the deployment's appliers get its partitions back
	// once its session times out. The items are not read meanwhile: a
	// read while the watermark stalls finds the value past its soft
	// deadline and refreshes it from the source, which would hide the
	// hole from the visitors who ask later.
	sleep(ctx, hold)
	if !rogue.Exited() {
		what += fmt.Sprintf(", killed %s after the change", time.Since(changed).Round(100*time.Millisecond))
	}
	rogue.Kill()
	unlock()
	locked = false
	// Visitors come back once the watermark is past the change and has
	// caught up: a value whose extended observation lags by more than the
	// soft lifetime (3-5 s) is refreshed in the background when read,
	// which a visitor reading while the appliers catch up would trigger.
	caughtUp := waitFor(cctx, readFor, func() bool {
		age, err := s.watermarkAge(cctx)
		return err == nil && age < watermarkCaughtUp && time.Now().Add(-age).After(changed)
	})
	if caughtUp {
		what += fmt.Sprintf("; the watermark passed the change and caught up %s after it", time.Since(changed).Round(100*time.Millisecond))
	} else {
		what += fmt.Sprintf("; the watermark did not pass the change and catch up within %s", readFor)
	}
	// Then visitors ask, until past the bound after the change; an answer
	// with the version before the change is an old value (the checker
	// judges it: within the bound it is the pipeline's delay).
	var old, past int
	var oldest time.Duration
	oldItems := map[itemKey]bool{}
	for time.Since(changed) < readFor && ctx.Err() == nil {
		for i, a := range in.readOwn(cctx, items) {
			if a.Status != http.StatusOK || a.Version != 1 {
				continue
			}
			old++
			oldItems[items[i]] = true
			age := a.Sent.Sub(changed)
			oldest = max(oldest, age)
			if age > bound {
				past++
			}
		}
		sleep(ctx, 500*time.Millisecond)
	}
	return what + fmt.Sprintf("; %d items changed, read until %s after: the old value served %d times (%d items), the latest %s after the change, %d past the bound",
		len(items), readFor, old, len(oldItems), oldest.Round(100*time.Millisecond), past), nil
}

// assignedPartitions is the partition list of the applier's latest
// non-empty "partitions assigned" log line (the stages log slog's text
// format: partitions=[2] or partitions="[2 3]"), "" if none.
func assignedPartitions(out string) string {
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		_, rest, ok := strings.Cut(lines[i], "partitions assigned")
		if !ok {
			continue
		}
		_, v, ok := strings.Cut(rest, " partitions=")
		if !ok {
			continue
		}
		if q, ok := strings.CutPrefix(v, `"`); ok {
			v, _, _ = strings.Cut(q, `"`)
		} else {
			v, _, _ = strings.Cut(v, " ")
		}
		if v != "" && v != "[]" {
			return v
		}
	}
	return ""
}

// lastLineWith is the last line of out holding word, trimmed to 400 bytes.
func lastLineWith(out, word string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], word) {
			return tail(strings.TrimSpace(lines[i]), 400)
		}
	}
	return tail(strings.TrimSpace(out), 400)
}

// argOf is the value of flag in args ("" if absent).
func argOf(args []string, flag string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag {
			return args[i+1]
		}
	}
	return ""
}

// SecondTable is the second table's mapping: shop.offers, shaped as
// ForeignTableExample, never adopted (nothing captures it: a table only a
// reader of one's own reads).
func SecondTable() catalog.Table {
	t := ForeignTableExample()
	t.Name = "shop.offers"
	return t
}

// secondTable runs the fault; hold is how long the catalog's serve
// processes are asked for the items after the second reader's reads.
func (in *injector) secondTable(ctx context.Context, hold time.Duration) (string, error) {
	s := in.sys
	second := SecondTable()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hold+secondReadyWithin+2*time.Minute)
	defer cancel()
	n := identityRuns.Add(1)
	prefix := fmt.Sprintf("second-%d", n)
	items, err := in.insertOwnItems(cctx, prefix)
	if err != nil {
		return "", err
	}
	// The same ids in the second table, at the same version, each payload
	// naming its table: the checker knows a row of the catalog's by its
	// lack of one.
	conn, err := in.pgConn(cctx)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	ddl := strings.Replace(foreignDDL(second), "CREATE TABLE ", "CREATE TABLE IF NOT EXISTS ", 1)
	if _, err := conn.Exec(cctx, ddl); err != nil {
		return "", fmt.Errorf("create %s: %w", second.Name, err)
	}
	for _, k := range items {
		if _, err := conn.Exec(cctx, fmt.Sprintf("INSERT INTO %s (%s, %s, %s, %s, %s) VALUES ($1, $2, 1, %s, jsonb_build_object('tenant', $1::text, 'item', $2::text, 'v', 1, 'table', $3::text))",
			second.Qualified(), col(second.TenantColumn), col(second.ItemColumn), col(second.VersionColumn), col(second.StateColumn), col(second.Payload[0]), litActive(second.ActiveState)),
			k.tenant, k.item, second.Name); err != nil {
			return "", fmt.Errorf("insert into %s: %w", second.Name, err)
		}
	}
	sleep(ctx, 2*time.Second) // the catalog inserts' invalidations arrive

	// The second reader: the catalog's serve as it runs now, on the second
	// table's mapping and addresses of its own, in the same namespace.
	// Redis is held meanwhile: a namespace's identity record lost with a
	// restarted Redis is bound by whichever process claims first.
	unlock := in.lock("redis")
	defer unlock()
	a, err := addr()
	if err != nil {
		return "", err
	}
	m, err := addr()
	if err != nil {
		return "", err
	}
	args := setArg(setArg(setArg(slices.Clone(s.serves[0].Config().Args), "--addr", a), "--metrics-addr", m), "--namespace", s.watermarkNS())
	tf := (Config{Table: second}).tableFlags()
	for i := 0; i+1 < len(tf); i += 2 {
		args = setArg(args, tf[i], tf[i+1])
	}
	reader := s.stage(fmt.Sprintf("serve-%s%d", second.Name, n), args...)
	if err := reader.Start(); err != nil {
		return "", err
	}
	defer reader.Stop(stageGrace)
	started := time.Now()
	what := fmt.Sprintf("serve --table %s --namespace %s", second.Name, s.watermarkNS())
	rerr := reader.Ready(cctx, "http://"+m, secondReadyWithin)
	filled, asked, foreign := 0, 0, 0
	switch {
	case reader.Exited():
		what += fmt.Sprintf(" refused at start (exit %d after %s: %s)", reader.ExitCode(), time.Since(started).Round(100*time.Millisecond),
			lastLineWith(reader.Output(), "namespace"))
	case rerr != nil:
		what += fmt.Sprintf(" not ready within %s (%v)", secondReadyWithin, rerr)
	default:
		// Its clients ask for the items first: misses, filled from its
		// table. The catalog's visitors ask for each right after it was
		// filled: later, on a busy box, a watermark that lags would have
		// the catalog's serve refresh the entry from its own table first.
		for i, k := range items {
			code, it, _, err := in.load.doAt(cctx, "http://"+a, k.tenant, http.MethodGet, "/v1/catalog/items/"+k.item, nil, "")
			if err == nil && code == http.StatusOK && it.Display.Table == second.Name {
				filled++
				if c, ok := in.load.getOn(cctx, i%len(s.serves), k.tenant, k.item, 0, false); ok {
					asked++
					if c.Status == http.StatusOK && c.PayloadTable != "" {
						foreign++
					}
				}
			}
		}
		if filled == 0 && reader.Exited() {
			// Ready can answer from the metrics address a moment before
			// serve's identity claim refuses it and it exits: a process
			// that exits before answering anything was refused at start.
			what += fmt.Sprintf(" refused at start (ready, then exit %d after %s: %s)", reader.ExitCode(), time.Since(started).Round(100*time.Millisecond),
				lastLineWith(reader.Output(), "namespace"))
			break
		}
		what += fmt.Sprintf(" ran: answered %d of %d items with its own rows", filled, len(items))
	}
	// Then the catalog's visitors ask for them.
	var lastForeign time.Duration
	readFrom := time.Now()
	for time.Since(readFrom) < hold && ctx.Err() == nil {
		for _, a := range in.readOwn(cctx, items) {
			asked++
			if a.Status == http.StatusOK && a.PayloadTable != "" {
				foreign++
				lastForeign = a.Sent.Sub(readFrom)
			}
		}
		sleep(ctx, 500*time.Millisecond)
	}
	what += fmt.Sprintf("; the catalog's serve processes answered %d of %d reads of the same ids with %s's rows", foreign, asked, second.Name)
	if foreign > 0 {
		what += fmt.Sprintf(", the latest %s after its reads", lastForeign.Round(100*time.Millisecond))
	}
	if !reader.Exited() && filled == 0 && rerr == nil {
		return what, errors.New("the second reader ran but filled nothing: the fault proves nothing")
	}
	return what, nil
}
