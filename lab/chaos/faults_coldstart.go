package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark/tidemark/lab/proc"
	"github.com/tidemark/tidemark/schema"
)

// FaultColdStart: capture's first start against a cache tier that already
// holds values. Items of the fault's own (no writer touches them) are read
// into the cache; both captures and appliers go down, the slot is dropped,
// the items change while no slot exists, and the pipeline comes back on a
// new topic and consumer group: no record on the topic, no saved state,
// which is what a first deployment of capture looks like. The items are
// read until past the bound after the change: a watermark extending the
// values read before the slot existed would serve them.
const FaultColdStart = "cold-start"

// coldStarts numbers the fault's topics and groups within a run.
var coldStarts atomic.Int64

// coldStartItems per tenant.
const coldStartItems = 10

// coldStart runs the fault; hold is how long after the change the items
// are read (past the bound).
func (in *injector) coldStart(ctx context.Context, hold time.Duration) (string, error) {
	s := in.sys
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hold+3*time.Minute)
	defer cancel()
	n := coldStarts.Add(1)
	conn, err := in.pgConn(cctx)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	var items []itemKey
	for _, t := range s.tenants {
		for i := range coldStartItems {
			items = append(items, itemKey{t, fmt.Sprintf("cold-%d-%d", n, i)})
		}
	}
	for _, k := range items {
		if _, err := conn.Exec(cctx, `INSERT INTO catalog.items (tenant_id, item_id, version, display)
			VALUES ($1, $2, 1, jsonb_build_object('tenant', $1::text, 'item', $2::text, 'v', 1))`, k.tenant, k.item); err != nil {
			return "", fmt.Errorf("insert the fault's items: %w", err)
		}
	}
	readAll := func() {
		var wg sync.WaitGroup
		for i, k := range items {
			wg.Add(1)
			go func() {
				defer wg.Done()
				in.load.getOn(cctx, i%len(s.serves), k.tenant, k.item, 0, false)
			}()
		}
		wg.Wait()
	}
	// The inserts' invalidations arrive; then the items are cached.
	time.Sleep(2 * time.Second)
	readAll()
	readAll()

	for _, p := range append(append([]*proc.Process(nil), s.captures...), s.appliers...) {
		p.Kill()
	}
	err = in.dropSlot(cctx)
	// Changed while no slot exists: no change record will ever carry it.
	if _, uerr := conn.Exec(cctx, `UPDATE catalog.items SET version = version + 1, updated_at = now(),
		display = jsonb_build_object('tenant', tenant_id, 'item', item_id, 'v', version + 1)
		WHERE item_id LIKE $1`, fmt.Sprintf("cold-%d-%%", n)); uerr != nil {
		err = errors.Join(err, fmt.Errorf("change the fault's items: %w", uerr))
	}
	changed := time.Now()
	topic, group := fmt.Sprintf("%s.cold%d", s.topic, n), fmt.Sprintf("%s-cold%d", s.group, n)
	for _, p := range s.captures {
		p.SetArgs(setArg(slices.Clone(p.Config().Args), "--topic", topic)...)
	}
	for _, p := range s.appliers {
		p.SetArgs(setArg(setArg(slices.Clone(p.Config().Args), "--topic", topic), "--group", group)...)
	}
	for i, p := range s.captures {
		err = errors.Join(err, p.Start())
		if i == 0 {
			time.Sleep(500 * time.Millisecond) // the first one creates the topic and the slot
		}
	}
	// The namespace's identity record binds it to the old group, and an
	// applier of another group is refused (cache.ClaimIdentity): the
	// operator who moves the namespace to a new group unbinds the old one
	// first, as the refusal says.
	if derr := s.rdb.HDel(cctx, schema.IdentityKey(s.watermarkNS()), schema.FieldIdentityGroup).Err(); derr != nil {
		err = errors.Join(err, fmt.Errorf("unbind the old group from the namespace's identity: %w", derr))
	}
	for _, p := range s.appliers {
		err = errors.Join(err, p.Start())
	}
	// Read until past the bound after the change, as visitors would.
	for time.Since(changed) < hold && ctx.Err() == nil {
		readAll()
		sleep(ctx, 500*time.Millisecond)
	}
	what := fmt.Sprintf("%d items read, changed with no slot, pipeline on topic %s (group %s), read %s after", len(items), topic, group,
		hold.Round(time.Second))
	// The pipeline must be back: the watermark past the change (an applier
	// of the new group refused, or a capture that never streams, keeps no
	// promise broken but serves nothing from the cache from then on).
	wait := in.load.rec.checker.Bound
	if len(s.cfg.Kinds()) > 1 {
		wait = canaryWaitAmongFaults
	}
	if !waitFor(cctx, max(0, wait-time.Since(changed)), func() bool {
		age, werr := s.watermarkAge(cctx)
		return werr == nil && time.Now().Add(-age).After(changed)
	}) {
		in.load.rec.addViolation(Violation{Kind: KindPipelineStopped,
			Detail: fmt.Sprintf("cold start: the watermark did not pass the change within %s: the pipeline on topic %s (group %s) did not come back", wait, topic, group)})
		what += fmt.Sprintf(": the watermark did not pass the change within %s", wait)
	}
	return what, err
}
