// Package meta describes tables and where their tablets are: the table
// catalog (schema, the paper keeps it in Chubby) and, in the cluster, the
// METADATA rows that locate tablets. Both the master and the tablet servers
// read it; neither owns it.
//
// In one-process mode (tabula dev) the catalog is a set of small objects in
// the object store (master.NewBlobCatalog). A table's tablets are found by
// starting from the table's initial tablets (Table.Tablets) and following
// the splits recorded in the tablets' own states, so a split commits by
// saving tablet states alone. The cluster replaces both with Consul keys and METADATA.
package meta

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tabuladb/tabula/security/acl"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// TableID names a table within an instance. The Cloud Bigtable API spells
// it projects/P/instances/I/tables/T; the project is accepted as given and
// the instance is a namespace.
type TableID struct {
	Instance string
	Table    string
}

// String returns "instance/table".
func (id TableID) String() string { return id.Instance + "/" + id.Table }

// ErrBadName is matched by errors from ParseTableName and ParseInstanceName.
var ErrBadName = errors.New("malformed resource name")

// ParseInstanceName parses projects/P/instances/I and returns P and I.
func ParseInstanceName(name string) (project, instance string, err error) {
	p := strings.Split(name, "/")
	if len(p) != 4 || p[0] != "projects" || p[2] != "instances" || p[1] == "" || p[3] == "" {
		return "", "", fmt.Errorf("%w: %q is not projects/<project>/instances/<instance>", ErrBadName, name)
	}
	return p[1], p[3], nil
}

// ParseTableName parses projects/P/instances/I/tables/T.
func ParseTableName(name string) (TableID, error) {
	if name == MetadataTableName {
		return MetadataTable, nil
	}
	p := strings.Split(name, "/")
	if len(p) != 6 || p[0] != "projects" || p[2] != "instances" || p[4] != "tables" || p[1] == "" || p[3] == "" || p[5] == "" {
		return TableID{}, fmt.Errorf("%w: %q is not projects/<project>/instances/<instance>/tables/<table>", ErrBadName, name)
	}
	if err := ValidateTableName(p[5]); err != nil {
		return TableID{}, err
	}
	return TableID{Instance: p[3], Table: p[5]}, nil
}

// ValidateTableName checks a table ID as Cloud Bigtable does:
// [_a-zA-Z0-9][-_.a-zA-Z0-9]*, at most 50 characters.
func ValidateTableName(t string) error {
	if len(t) == 0 || len(t) > 50 {
		return fmt.Errorf("%w: table id %q must be 1 to 50 characters", ErrBadName, t)
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || (i > 0 && (c == '-' || c == '.'))
		if !ok {
			return fmt.Errorf("%w: table id %q must match [_a-zA-Z0-9][-_.a-zA-Z0-9]*", ErrBadName, t)
		}
	}
	return nil
}

// FullName returns projects/<project>/instances/<instance>/tables/<table>
// (MetadataTableName for METADATA).
func (id TableID) FullName(project string) string {
	if id == MetadataTable {
		return MetadataTableName
	}
	return "projects/" + project + "/instances/" + id.Instance + "/tables/" + id.Table
}

// Granularity is the timestamp granularity of a table's cells.
type Granularity int

// The granularities of the Cloud Bigtable API. Millis, the default, requires
// client timestamps to be multiples of 1000 µs.
const (
	GranularityMillis Granularity = 0
	GranularityMicros Granularity = 1
)

// TabletRef is one of a table's initial tablets.
type TabletRef struct {
	ID    string `json:"id"`
	Start []byte `json:"start,omitempty"`
	End   []byte `json:"end,omitempty"` // empty: the end of the table
}

// Table is a table's catalog entry: its schema and initial tablets.
type Table struct {
	ID                 TableID                             `json:"id"`
	Families           map[string]tabletdesc.Family        `json:"families"`
	LocalityGroups     map[string]tabletdesc.LocalityGroup `json:"locality_groups,omitempty"`
	Granularity        Granularity                         `json:"granularity"`
	DeletionProtection bool                                `json:"deletion_protection"`
	// Tablets are the tablets the table was created with (or re-created
	// with by DropRowRange of everything), ordered by range and covering
	// all rows. Splits since are recorded in the tablets' states.
	Tablets []TabletRef `json:"tablets"`
	Created time.Time   `json:"created"`
	// Generation increases with every change of the entry.
	Generation uint64 `json:"generation"`
	// AuthorizedViews are the table's authorized views by ID.
	AuthorizedViews map[string]AuthorizedView `json:"authorized_views,omitempty"`
	// ACL is the table's grants (security/acl), changed by the IAM RPCs
	// (`tabula grant`); enforced by the servers' guard when
	// authentication is on.
	ACL acl.Policy `json:"acl,omitzero"`
	// Restoring marks a table whose creation by reference (RestoreTable,
	// UndeleteTable) has not finished: its entry exists, but some of its
	// tablets may not be known to METADATA yet. Such a table is hidden —
	// the admin API answers NOT_FOUND, its tablets are not assigned — until
	// the creator, or the master repairing a creation a crash cut short,
	// has written every tablet's METADATA row and cleared the flag.
	Restoring bool `json:"restoring,omitempty"`
}

// Schema returns the part of the table's schema its tablets need.
func (t Table) Schema() tabletdesc.Schema {
	return tabletdesc.Schema{Families: t.Families, LocalityGroups: t.LocalityGroups}
}

// Dir returns the object-name prefix under which the table's tablets keep
// their SSTables: tables/<instance>/<table>. Every tablet of the table,
// split children included, writes there, so that deleting the table can
// collect its files by listing Dir()+"/" (the trailing slash keeps table
// "a" from matching the files of table "ab").
func (t Table) Dir() string { return TableDirPrefix + t.ID.Instance + "/" + t.ID.Table }

// TableDirPrefix begins every table's Dir.
const TableDirPrefix = "tables/"
