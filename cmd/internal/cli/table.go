package cli

import "github.com/tidemark/tidemark/catalog"

// TableFlags is the catalog table mapping (catalog.Table): one set of flags,
// environment variables and config keys taken by every command that touches
// the catalog (capture, serve, inspect, adopt, chaos).
type TableFlags struct {
	Table           string   `field:"table.Name,capture.Table,api.Table.Name,audit.Table.Name,inspect.Table.Name,adopt.Table.Name,chaos.Table.Name" name:"table" env:"TIDEMARK_TABLE" default:"${table_Name}" help:"Catalog table (schema.table)."`
	TenantColumn    string   `field:"table.TenantColumn,capture.TenantColumn,api.Table.TenantColumn,audit.Table.TenantColumn,inspect.Table.TenantColumn,adopt.Table.TenantColumn,chaos.Table.TenantColumn" name:"tenant-column" env:"TIDEMARK_TENANT_COLUMN" default:"${table_TenantColumn}" help:"Tenant column of the catalog table."`
	ItemColumn      string   `field:"table.ItemColumn,capture.ItemColumn,api.Table.ItemColumn,audit.Table.ItemColumn,inspect.Table.ItemColumn,adopt.Table.ItemColumn,chaos.Table.ItemColumn" name:"item-column" env:"TIDEMARK_ITEM_COLUMN" default:"${table_ItemColumn}" help:"Item column of the catalog table."`
	VersionColumn   string   `field:"table.VersionColumn,capture.VersionColumn,api.Table.VersionColumn,audit.Table.VersionColumn,inspect.Table.VersionColumn,adopt.Table.VersionColumn,chaos.Table.VersionColumn" name:"version-column" env:"TIDEMARK_VERSION_COLUMN" default:"${table_VersionColumn}" help:"Version column (integer, raised by every write)."`
	StateColumn     string   `field:"table.StateColumn,capture.StateColumn,api.Table.StateColumn,audit.Table.StateColumn,inspect.Table.StateColumn,adopt.Table.StateColumn,chaos.Table.StateColumn" name:"state-column" env:"TIDEMARK_STATE_COLUMN" default:"${table_StateColumn}" help:"State column; a row whose state is --deleted-state is a tombstone (empty: no tombstones)."`
	DeletedState    string   `field:"table.DeletedState,capture.DeletedState,api.Table.DeletedState,audit.Table.DeletedState,inspect.Table.DeletedState,adopt.Table.DeletedState,chaos.Table.DeletedState" name:"deleted-state" env:"TIDEMARK_DELETED_STATE" default:"${table_DeletedState}" help:"State value of a tombstone."`
	ActiveState     string   `field:"table.ActiveState,api.Table.ActiveState,audit.Table.ActiveState,inspect.Table.ActiveState,adopt.Table.ActiveState,chaos.Table.ActiveState" name:"active-state" env:"TIDEMARK_ACTIVE_STATE" default:"${table_ActiveState}" help:"State value tidemark serve writes for a live item."`
	UpdatedAtColumn string   `field:"table.UpdatedAtColumn,api.Table.UpdatedAtColumn,audit.Table.UpdatedAtColumn,inspect.Table.UpdatedAtColumn,adopt.Table.UpdatedAtColumn,chaos.Table.UpdatedAtColumn" name:"updated-at-column" env:"TIDEMARK_UPDATED_AT_COLUMN" default:"${table_UpdatedAtColumn}" help:"Last-change timestamp column: orders the management list (empty: no list)."`
	PayloadColumns  []string `field:"table.Payload,api.Table.Payload,audit.Table.Payload,inspect.Table.Payload,adopt.Table.Payload,chaos.Table.Payload" name:"payload-columns" env:"TIDEMARK_PAYLOAD_COLUMNS" default:"${table_Payload}" help:"Columns that make up an item's display: one is used as its JSON value, several become an object keyed by column name."`
	PayloadSQL      string   `field:"table.PayloadSQL,api.Table.PayloadSQL,audit.Table.PayloadSQL,inspect.Table.PayloadSQL,adopt.Table.PayloadSQL,chaos.Table.PayloadSQL" name:"payload-sql" env:"TIDEMARK_PAYLOAD_SQL" help:"A SQL expression over the row (json or jsonb) used as display instead of --payload-columns."`
}

func (f TableFlags) CatalogTable() catalog.Table {
	return catalog.Table{Name: f.Table, TenantColumn: f.TenantColumn, ItemColumn: f.ItemColumn, VersionColumn: f.VersionColumn,
		StateColumn: f.StateColumn, DeletedState: f.DeletedState, ActiveState: f.ActiveState, UpdatedAtColumn: f.UpdatedAtColumn, Payload: f.PayloadColumns, PayloadSQL: f.PayloadSQL}
}
