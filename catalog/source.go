package catalog

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/schema"
)

// Querier runs a query returning one row (a *pgx.Conn or a *pgxpool.Pool).
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Source is the name capture gives the resolved markers of this table in
// db's database (schema.SourceName: the server's system identifier, the
// database, the table): what a serve process reading db expects of the
// markers that set its namespace's watermark (cache.Client.SetSource). A
// physical standby has its primary's system identifier.
func (t Table) Source(ctx context.Context, db Querier) (string, error) {
	var sysid, database string
	if err := db.QueryRow(ctx, `SELECT system_identifier::text, current_database() FROM pg_control_system()`).Scan(&sysid, &database); err != nil {
		return "", fmt.Errorf("catalog: the source's system identifier: %w", err)
	}
	return schema.SourceName(sysid, database, t.Name), nil
}
