package cli

import "github.com/tidemark/tidemark/catalog"

// TableFlags binds the catalog table mapping into t: one set of flags,
// environment variables and config keys taken by every command that touches
// the catalog (capture, serve, inspect, adopt, chaos).
func TableFlags(b *Binder, t *catalog.Table) {
	b.shared(&t.Name, "table", "Catalog table (schema.table).")
	b.shared(&t.TenantColumn, "tenant-column", "Tenant column of the catalog table.")
	b.shared(&t.ItemColumn, "item-column", "Item column of the catalog table.")
	b.shared(&t.VersionColumn, "version-column", "Version column (integer, raised by every write).")
	b.shared(&t.StateColumn, "state-column", "State column; a row whose state is --deleted-state is a tombstone (empty: no tombstones).")
	b.shared(&t.DeletedState, "deleted-state", "State value of a tombstone.")
	b.shared(&t.ActiveState, "active-state", "State value tidemark serve writes for a live item.")
	b.shared(&t.UpdatedAtColumn, "updated-at-column", "Last-change timestamp column: orders the management list (empty: no list).")
	b.shared(&t.Payload, "payload-columns", "Columns that make up an item's display: one is used as its JSON value, several become an object keyed by column name.")
	b.shared(&t.PayloadSQL, "payload-sql", "A SQL expression over the row (json or jsonb) used as display instead of --payload-columns.")
}
