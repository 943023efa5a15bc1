package tabletdesc

import (
	"fmt"
	"time"

	"github.com/tabuladb/tabula/storage/cell"
)

// DefaultLocalityGroup is the locality group of families that name none.
const DefaultLocalityGroup = "default"

// GCPolicy says which versions of a column garbage collection removes, with
// Cloud Bigtable's GcRule semantics. The rules set in one GCPolicy combine as
// a union: a version is collected when any of them collects it. The zero
// GCPolicy collects nothing.
type GCPolicy struct {
	// MaxVersions > 0 collects every version but the MaxVersions newest
	// (counted among the versions not deleted).
	MaxVersions int
	// MaxAge > 0 collects versions whose timestamp is older than now
	// minus MaxAge.
	MaxAge time.Duration
	// Union collects a version when any of its policies does.
	Union []GCPolicy
	// Intersection collects a version only when all of its (at least one)
	// policies do.
	Intersection []GCPolicy
}

// IsZero reports whether p collects nothing by construction.
func (p GCPolicy) IsZero() bool {
	return p.MaxVersions <= 0 && p.MaxAge <= 0 && len(p.Union) == 0 && len(p.Intersection) == 0
}

// Collects reports whether p collects the version of a column that is the
// index-th newest (0 = newest) among the column's live versions and has
// timestamp ts (microseconds), at time now (microseconds).
//
// The set of versions a policy collects is always a suffix of the column's
// versions ordered newest first (each rule is monotone in age and index),
// so collecting it never renumbers the versions that remain: applying a
// policy at a major compaction and again at read time gives the same result
// as applying it once.
func (p GCPolicy) Collects(index int, ts, now int64) bool {
	if p.MaxVersions > 0 && index >= p.MaxVersions {
		return true
	}
	if p.MaxAge > 0 && ts < now-p.MaxAge.Microseconds() {
		return true
	}
	for _, u := range p.Union {
		if u.Collects(index, ts, now) {
			return true
		}
	}
	if len(p.Intersection) > 0 {
		all := true
		for _, x := range p.Intersection {
			if !x.Collects(index, ts, now) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// Family is a column family of the tablet's table.
type Family struct {
	Name string
	// GC is applied at read time and at major compactions.
	GC GCPolicy
	// LocalityGroup names the group whose SSTables hold the family; ""
	// means DefaultLocalityGroup.
	LocalityGroup string
	// Aggregate, when set, makes the family an aggregate family: its
	// cells are written only by AddToCell and MergeToCell, and the cells
	// of one column and timestamp fold into one with this aggregator.
	// It never changes while the family exists.
	Aggregate cell.Aggregator `json:",omitempty"`
	// ValueType is the family's value_type as the admin API gave it (the
	// wire bytes of a google.bigtable.admin.v2.Type), kept to be answered
	// back; nil for an untyped family. Only the admin API reads it.
	ValueType []byte `json:",omitempty"`
}

// Group returns the name of the family's locality group: LocalityGroup, or
// DefaultLocalityGroup when that is empty.
func (f Family) Group() string {
	if f.LocalityGroup == "" {
		return DefaultLocalityGroup
	}
	return f.LocalityGroup
}

// Compression is the codec of a locality group's SSTable data blocks. The
// values are stored in catalog entries (as JSON numbers), so they never
// change; the tablet maps them to the SSTable format's codecs.
type Compression uint8

// The codecs a locality group may choose.
const (
	NoCompression     Compression = 0
	SnappyCompression Compression = 1
	ZstdCompression   Compression = 2
)

// String returns "none", "snappy", "zstd" or "compression(N)".
func (c Compression) String() string {
	switch c {
	case NoCompression:
		return "none"
	case SnappyCompression:
		return "snappy"
	case ZstdCompression:
		return "zstd"
	}
	return fmt.Sprintf("compression(%d)", uint8(c))
}

// LocalityGroup configures the SSTables of a set of families that are read
// together (paper §6). A group not listed in the Schema has default options.
type LocalityGroup struct {
	Name string
	// InMemory loads the group's SSTables whole into memory when they are
	// opened, so reads of it touch no storage.
	InMemory bool
	// Compression of the group's data blocks; the zero value is none.
	Compression Compression
	// BlockSize of the group's data blocks; 0 means the sstable default
	// (64 KiB).
	BlockSize int
}

// Schema is the part of a table's schema a tablet needs. It is the
// caller's: the tablet keeps only the names of its families in its State,
// to notice families dropped while it was closed.
type Schema struct {
	Families       map[string]Family // by name; Family.Name may be left empty
	LocalityGroups map[string]LocalityGroup
}

// Validate checks family names and that every family's group is usable.
func (s Schema) Validate() error {
	for name, f := range s.Families {
		if f.Name != "" && f.Name != name {
			return fmt.Errorf("schema: family %q listed under name %q", f.Name, name)
		}
		if err := cell.ValidateFamilyName("column_families", name); err != nil {
			return err
		}
		if !f.Aggregate.Valid() {
			return fmt.Errorf("schema: family %q has unknown aggregator %v", name, f.Aggregate)
		}
	}
	return nil
}

// GroupOf returns the locality group of a family and whether the family
// exists.
func (s Schema) GroupOf(family string) (string, bool) {
	f, ok := s.Families[family]
	if !ok {
		return "", false
	}
	return f.Group(), true
}

// Group returns the options of a locality group (defaults when unlisted),
// with Name set to name.
func (s Schema) Group(name string) LocalityGroup {
	g, ok := s.LocalityGroups[name]
	if !ok {
		g = LocalityGroup{}
	}
	g.Name = name
	return g
}

// Groups returns the names of the locality groups the families use.
func (s Schema) Groups() map[string]bool {
	out := make(map[string]bool)
	for _, f := range s.Families {
		out[f.Group()] = true
	}
	return out
}

// Clone returns a copy of s with maps of its own (the GC policies of the
// families are shared), in which every Family's Name is its key.
func (s Schema) Clone() Schema {
	out := Schema{Families: make(map[string]Family, len(s.Families)), LocalityGroups: make(map[string]LocalityGroup, len(s.LocalityGroups))}
	for k, v := range s.Families {
		v.Name = k
		out.Families[k] = v
	}
	for k, v := range s.LocalityGroups {
		out.LocalityGroups[k] = v
	}
	return out
}
