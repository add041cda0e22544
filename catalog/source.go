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
	sysid, database, err := SourceDatabase(ctx, db)
	if err != nil {
		return "", err
	}
	return schema.SourceName(sysid, database, t.Name), nil
}

// SourceDatabase reads the server's system identifier and db's database:
// the parts of the source's name (schema.SourceName) that do not depend on
// the table.
func SourceDatabase(ctx context.Context, db Querier) (systemID, database string, err error) {
	if err := db.QueryRow(ctx, `SELECT system_identifier::text, current_database() FROM pg_control_system()`).Scan(&systemID, &database); err != nil {
		return "", "", fmt.Errorf("catalog: the source's system identifier: %w", err)
	}
	return systemID, database, nil
}
