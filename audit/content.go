package audit

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/catalog"
	"github.com/tidemark/tidemark/inspect"
	"github.com/tidemark/tidemark/schema"
)

// compareContent is false only with the build tag tidemark_trust_version
// (trusted_version.go): the auditor as it was, comparing versions alone.
var compareContent = true

// sourceRow is an item's row with the digest of its display as the read
// path caches it (the jsonb's text, catalog.Table.DisplaySQL).
type sourceRow struct {
	inspect.SourceRow
	digest string // md5 hex of the display's text; "" for a tombstone
}

// contentSQL selects what inspect.SourceRows does plus md5 of the display,
// for the ($1 tenants, $2 items) of a batch: the source sends a digest, not
// the payload. The comment keeps the name the budget's judges count the
// auditor's reads by (lab/chaos/budget.go, audit's budget test).
func contentSQL(t catalog.Table) string {
	q := func(c string) string { return pgx.Identifier{c}.Sanitize() }
	upd := "now()"
	if t.UpdatedAtColumn != "" {
		upd = q(t.UpdatedAtColumn) + "::timestamptz"
	}
	return fmt.Sprintf(`SELECT %[1]s::text, %[2]s::text, %[3]s::bigint, CASE WHEN %[4]s THEN 'deleted' ELSE 'active' END, %[5]s,
		CASE WHEN %[4]s THEN '' ELSE md5((%[6]s)::text) END /* tidemark source versions, with the display digest (audit) */
		FROM %[7]s JOIN unnest($1::text[], $2::text[]) AS tidemark_k(tidemark_t, tidemark_it) ON %[1]s = tidemark_t AND %[2]s = tidemark_it`,
		q(t.TenantColumn), q(t.ItemColumn), q(t.VersionColumn), t.DeletedSQL(), upd, t.DisplaySQL(), t.Qualified())
}

// sourceRows reads the rows of entries in one statement, keyed by
// schema.Key(tenant, item); an item without a row is absent.
func (a *Auditor) sourceRows(ctx context.Context, entries []inspect.Entry) (map[string]sourceRow, error) {
	out := make(map[string]sourceRow, len(entries))
	tenants, items := make([]string, len(entries)), make([]string, len(entries))
	for i, e := range entries {
		tenants[i], items[i] = e.Tenant, e.Item
	}
	rows, err := a.d.DB.Query(ctx, a.contentSQL, tenants, items)
	if err != nil {
		return nil, fmt.Errorf("audit: read source rows: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var t, it string
		var r sourceRow
		if err := rows.Scan(&t, &it, &r.Version, &r.State, &r.Updated, &r.digest); err != nil {
			return nil, fmt.Errorf("audit: read source rows: %w", err)
		}
		r.Found = true
		out[schema.Key(t, it)] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("audit: read source rows: %w", err)
	}
	return out, nil
}

// cachedDigests reads the payload of each entry that has the source's
// version (the only ones whose content is judged) and returns its md5 by
// key; an entry gone meanwhile is absent.
func (a *Auditor) cachedDigests(ctx context.Context, entries []inspect.Entry) (map[string]string, error) {
	cmds := make([]*redis.StringCmd, len(entries))
	_, err := a.d.Redis.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, e := range entries {
			cmds[i] = p.HGet(ctx, schema.RedisKey(a.cfg.Namespace, e.Tenant, e.Item), schema.FieldPayload)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("audit: read cached payloads: %w", err)
	}
	out := make(map[string]string, len(entries))
	for i, e := range entries {
		b, err := cmds[i].Bytes()
		if err != nil {
			continue
		}
		sum := md5.Sum(b)
		out[schema.Key(e.Tenant, e.Item)] = hex.EncodeToString(sum[:])
	}
	return out, nil
}
