package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/internal/kafkaconn"
	"github.com/tidemark/tidemark/relay"
)

// FaultTableRewrite: a DBA's migration rewrites the catalog table in place
// (ALTER TABLE ... ALTER COLUMN <payload> TYPE <its own type> USING ...),
// changing the payload of items of the fault's own, read into the cache
// first, without a new version; then the items are read through every
// serve process past the bound. A rewrite streams no row change at all
// while heartbeats go on: capture must see the table's definition change
// (its fingerprint, checked before every beat) and send a reset marker,
// or the cache serves the values the rewrite replaced: KindStale.
const FaultTableRewrite = "table-rewrite"

// FaultCaptureStateLost: the same rewrite while both captures are down and
// capture's state topic (<topic>.capture) has been deleted (an operator
// clearing "internal" topics, or a retention given to it): the captures
// come back to a topic with history and no record of what they checked
// before. Capture must reset (state_missing), since nothing tells it the
// table changed meanwhile, or the heartbeats vouch for the values the
// rewrite replaced: KindStale.
const FaultCaptureStateLost = "capture-state-lost"

// tableRewrite runs FaultTableRewrite, or FaultCaptureStateLost with
// stateLost.
func (in *injector) tableRewrite(ctx context.Context, hold time.Duration, stateLost bool) (string, error) {
	s := in.sys
	t := s.cfg.Table
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	items, cached, err := in.cachedOwnItems(ctx, cctx, "rewrite")
	if err != nil {
		return "", err
	}

	conn, err := in.pgConn(cctx)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	payload := col(t.Payload[0])
	var typ string
	if err := conn.QueryRow(cctx, `SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = $1::regclass AND attname = $2`,
		t.Qualified(), t.Payload[0]).Scan(&typ); err != nil {
		return "", fmt.Errorf("read the payload column's type: %w", err)
	}
	ids := make([]string, len(items))
	for i, k := range items {
		ids[i] = litActive(k.item)
	}
	marker := time.Now().UnixNano()
	// The lock waits behind the load's writers; a wait past the timeout
	// fails the fault, not the run.
	if _, err := conn.Exec(cctx, "SET lock_timeout = '20s'"); err != nil {
		return "", err
	}
	if stateLost {
		for _, p := range s.captures {
			p.Kill()
		}
		if err := in.deleteStateTopic(cctx); err != nil {
			return "", errors.Join(err, in.startCaptures())
		}
	}
	began := time.Now()
	_, err = conn.Exec(cctx, fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s TYPE %s USING CASE WHEN %s IN (%s) THEN %s || jsonb_build_object('unbumped', %d::bigint) ELSE %s END",
		t.Qualified(), payload, typ, col(t.ItemColumn), strings.Join(ids, ", "), payload, marker, payload))
	changed := time.Now()
	rewrite := changed.Sub(began)
	if stateLost {
		err = errors.Join(err, in.startCaptures())
	}
	if err != nil {
		return "", fmt.Errorf("rewrite the table: %w", err)
	}
	rows, err := conn.Query(cctx, fmt.Sprintf("SELECT %s, %s, %s FROM %s WHERE %s = ANY($1)",
		col(t.TenantColumn), col(t.ItemColumn), col(t.VersionColumn), t.Qualified(), col(t.ItemColumn)), itemIDs(items))
	if err != nil {
		return "", fmt.Errorf("read the fault's items: %w", err)
	}
	var read []itemKey
	var at []time.Time
	for rows.Next() {
		var u Unbumped
		if err := rows.Scan(&u.Tenant, &u.Item, &u.Version); err != nil {
			return "", fmt.Errorf("read the fault's items: %w", err)
		}
		u.Marker, u.VisibleBy = marker, changed
		in.load.rec.addUnbumped(u)
		read = append(read, itemKey{u.Tenant, u.Item})
		at = append(at, changed)
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("read the fault's items: %w", err)
	}

	start := time.Now()
	left := in.readPastBound(ctx, read, at, hold)
	what := fmt.Sprintf("%s rewritten in place (ALTER COLUMN %s TYPE %s USING ..., %s), %d items' payloads changed without a new version (%d of %d answered from the cache before)",
		t.Name, t.Payload[0], typ, rewrite.Round(time.Millisecond), len(read), cached, len(items))
	if stateLost {
		what = "captures killed, " + relay.StateTopic(s.topic) + " deleted, " + what + ", captures started"
	}
	what += ", read for " + time.Since(start).Round(time.Second).String()
	if left > 0 {
		what += fmt.Sprintf("; %d of them %s", left, neverJudged)
	}
	return what, nil
}

// deleteStateTopic deletes capture's state topic.
func (in *injector) deleteStateTopic(ctx context.Context) error {
	s := in.sys
	opts, err := kafkaconn.Opts(strings.Split(s.brokers, ","), s.cfg.KafkaConn, s.log)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).DeleteTopics(ctx, relay.StateTopic(s.topic))
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return fmt.Errorf("delete %s: %w", relay.StateTopic(s.topic), err)
	}
	return nil
}

// startCaptures starts both captures again, the first one a moment ahead.
func (in *injector) startCaptures() error {
	var err error
	for i, p := range in.sys.captures {
		err = errors.Join(err, p.Start())
		if i == 0 {
			time.Sleep(500 * time.Millisecond)
		}
	}
	return err
}
