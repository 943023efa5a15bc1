package master

import (
	"context"

	"github.com/tabuladb/tabula/storage/meta"
)

// TableHost is where the admin API's table changes take effect: whatever
// serves the tables' tablets. In one process (tabula dev) it is the
// tabletserver.Host itself; in a cluster it is storage/cluster's
// clusterTableHost, which writes METADATA and calls the tablet servers'
// TabletControl service.
//
// Errors may be gRPC status errors (they are passed to the admin client as
// they are) or plain errors (reported as INTERNAL, or by the meta and tablet
// sentinels they match).
type TableHost interface {
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
