package meta

import (
	"bytes"
	"fmt"
	"strings"
	"time"
)

// AuthorizedView is an authorized view of a table (Cloud Bigtable's
// SubsetView): the rows that begin with one of RowPrefixes and, in them,
// the cells of the columns Families lists. It is kept in the table's
// catalog entry (Table.AuthorizedViews), with the schema.
type AuthorizedView struct {
	// RowPrefixes: a row is in the view when its key begins with one of
	// them; "" covers every row, none covers no row.
	RowPrefixes [][]byte `json:"row_prefixes,omitempty"`
	// Families maps a family name to the columns of it in the view.
	Families           map[string]FamilySubset `json:"families,omitempty"`
	DeletionProtection bool                    `json:"deletion_protection,omitempty"`
	// Etag changes with every update of the view; a request that sends
	// one must send the current one.
	Etag    string    `json:"etag"`
	Created time.Time `json:"created"`
}

// FamilySubset is the part of a family an authorized view covers: the
// columns named in Qualifiers and those whose qualifier begins with one of
// QualifierPrefixes ("" covers the whole family).
type FamilySubset struct {
	Qualifiers        [][]byte `json:"qualifiers,omitempty"`
	QualifierPrefixes [][]byte `json:"qualifier_prefixes,omitempty"`
}

// CoversRow reports whether the row key is in the view.
func (v AuthorizedView) CoversRow(key []byte) bool {
	for _, p := range v.RowPrefixes {
		if bytes.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// CoversColumn reports whether the column family:qualifier is in the view.
func (v AuthorizedView) CoversColumn(family string, qualifier []byte) bool {
	fs, ok := v.Families[family]
	if !ok {
		return false
	}
	for _, q := range fs.Qualifiers {
		if bytes.Equal(q, qualifier) {
			return true
		}
	}
	for _, p := range fs.QualifierPrefixes {
		if bytes.HasPrefix(qualifier, p) {
			return true
		}
	}
	return false
}

// CoversFamily reports whether every column of the family is in the view.
func (v AuthorizedView) CoversFamily(family string) bool {
	for _, p := range v.Families[family].QualifierPrefixes {
		if len(p) == 0 {
			return true
		}
	}
	return false
}

// KeyRange is a range of byte strings [Start, End); a nil End is unbounded.
type KeyRange struct {
	Start, End []byte
}

// PrefixRange returns the range of the strings that begin with p.
func PrefixRange(p []byte) KeyRange {
	return KeyRange{Start: bytes.Clone(p), End: PrefixEnd(p)}
}

// PrefixEnd returns the first string after every string beginning with p:
// p with its last byte below 0xFF incremented and the rest dropped; nil
// (unbounded) when there is none (p empty or all 0xFF).
func PrefixEnd(p []byte) []byte {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] != 0xFF {
			end := bytes.Clone(p[:i+1])
			end[i]++
			return end
		}
	}
	return nil
}

// MergeRanges sorts ranges and merges those that overlap or touch, so that
// the result is disjoint and in order.
func MergeRanges(rs []KeyRange) []KeyRange {
	out := make([]KeyRange, 0, len(rs))
	sorted := append([]KeyRange(nil), rs...)
	for i := 1; i < len(sorted); i++ {
		for j := i; j > 0 && bytes.Compare(sorted[j].Start, sorted[j-1].Start) < 0; j-- {
			sorted[j], sorted[j-1] = sorted[j-1], sorted[j]
		}
	}
	for _, r := range sorted {
		if r.End != nil && bytes.Compare(r.Start, r.End) >= 0 {
			continue // empty
		}
		if n := len(out); n > 0 && (out[n-1].End == nil || bytes.Compare(r.Start, out[n-1].End) <= 0) {
			if out[n-1].End != nil && (r.End == nil || bytes.Compare(r.End, out[n-1].End) > 0) {
				out[n-1].End = r.End
			}
			continue
		}
		out = append(out, r)
	}
	return out
}

// RowRanges returns the view's rows as disjoint ranges in key order.
func (v AuthorizedView) RowRanges() []KeyRange {
	rs := make([]KeyRange, 0, len(v.RowPrefixes))
	for _, p := range v.RowPrefixes {
		rs = append(rs, PrefixRange(p))
	}
	return MergeRanges(rs)
}

// QualifierRanges returns the qualifiers of family in the view as disjoint
// ranges in order (a qualifier q is [q, q+"\x00")).
func (v AuthorizedView) QualifierRanges(family string) []KeyRange {
	fs := v.Families[family]
	rs := make([]KeyRange, 0, len(fs.Qualifiers)+len(fs.QualifierPrefixes))
	for _, q := range fs.Qualifiers {
		rs = append(rs, KeyRange{Start: bytes.Clone(q), End: append(bytes.Clone(q), 0)})
	}
	for _, p := range fs.QualifierPrefixes {
		rs = append(rs, PrefixRange(p))
	}
	return MergeRanges(rs)
}

// AuthorizedViewName is a parsed
// projects/P/instances/I/tables/T/authorizedViews/V.
type AuthorizedViewName struct {
	Project string
	Table   TableID
	View    string
}

// ParseAuthorizedViewName parses
// projects/P/instances/I/tables/T/authorizedViews/V (ErrBadName).
func ParseAuthorizedViewName(name string) (AuthorizedViewName, error) {
	p := strings.Split(name, "/")
	if len(p) != 8 || p[6] != "authorizedViews" {
		return AuthorizedViewName{}, fmt.Errorf("%w: %q is not projects/<project>/instances/<instance>/tables/<table>/authorizedViews/<view>", ErrBadName, name)
	}
	id, err := ParseTableName(strings.Join(p[:6], "/"))
	if err != nil {
		return AuthorizedViewName{}, err
	}
	if err := ValidateAuthorizedViewID(p[7]); err != nil {
		return AuthorizedViewName{}, err
	}
	return AuthorizedViewName{Project: p[1], Table: id, View: p[7]}, nil
}

// ValidateAuthorizedViewID checks a view ID as Cloud Bigtable does:
// [_a-zA-Z0-9][-_.a-zA-Z0-9]*, at most 128 characters.
func ValidateAuthorizedViewID(v string) error {
	if len(v) == 0 || len(v) > 128 {
		return fmt.Errorf("%w: authorized view id %q must be 1 to 128 characters", ErrBadName, v)
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || (i > 0 && (c == '-' || c == '.'))
		if !ok {
			return fmt.Errorf("%w: authorized view id %q must match [_a-zA-Z0-9][-_.a-zA-Z0-9]*", ErrBadName, v)
		}
	}
	return nil
}
