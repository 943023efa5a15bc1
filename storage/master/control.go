package master

import (
	"context"

	"github.com/tabuladb/tabula/storage/meta"
)

// TabletControl is what the master asks of the tablet servers. In one
// process (tabula dev) it is the tabletserver.Host itself.
//
// Errors may be gRPC status errors (they are passed to the admin client as
// they are) or plain errors (reported as INTERNAL, or by the meta and tablet
// sentinels they match).
type TabletControl interface {
	// OpenTable opens every tablet of t (the tablets listed in t.Tablets,
	// or their split descendants). It is idempotent; for a table already
	// open it applies t's schema.
	OpenTable(ctx context.Context, t meta.Table) error
	// DropTable closes and forgets the table's tablets. Their files stay:
	// the master collects them.
	DropTable(ctx context.Context, t meta.Table) error
	// UpdateSchema applies t's schema to its open tablets.
	UpdateSchema(ctx context.Context, t meta.Table) error
	// DropRowRange deletes every row whose key starts with prefix; an
	// empty prefix deletes all rows.
	DropRowRange(ctx context.Context, t meta.Table, prefix []byte) error
}
