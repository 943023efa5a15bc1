// Package acl is Tabula's access control: grants of read, write and admin
// on a table or on one of its column families, to principals and groups,
// and the superusers that may do everything. It is pure logic — no I/O, no
// gRPC — so that the servers, the master's IAM RPCs and the CLI share one
// meaning of a grant.
//
// A table's Policy is stored with its schema (meta.Table.ACL: in Consul in
// a cluster, in the catalog of tabula dev), so a grant changes without a
// restart and goes with the table.
//
// Semantics:
//   - A grant names a member ("user:NAME" or "group:NAME"), a family (""
//     for every family of the table, present and future) and permissions.
//   - Admin implies Read and Write. Admin is table-wide: a family grant of
//     Admin is refused by Validate.
//   - A subject may Read (Write) family F if some grant to it, or to one of
//     its groups, gives Read (Write) on F or on the whole table.
//   - Superusers (a server's configuration, not a table's) may do
//     everything on every table, including tables without a policy.
//   - A table without grants is reachable by superusers only: the default
//     is deny.
package acl

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Permission is a set of rights on a table or family.
type Permission uint8

// The rights. Admin implies Read and Write (Has).
const (
	Read Permission = 1 << iota
	Write
	Admin
)

// All is every right.
const All = Read | Write | Admin

// Has reports whether p grants want (every bit of it), Admin implying Read
// and Write.
func (p Permission) Has(want Permission) bool {
	if p&Admin != 0 {
		p |= Read | Write
	}
	return want != 0 && p&want == want
}

// String renders p as "read,write,admin" (the order is fixed), "" for none.
func (p Permission) String() string {
	var parts []string
	for _, n := range permNames {
		if p&n.p != 0 {
			parts = append(parts, n.name)
		}
	}
	return strings.Join(parts, ",")
}

var permNames = []struct {
	name string
	p    Permission
}{{"read", Read}, {"write", Write}, {"admin", Admin}}

// ParsePermission parses "read", "write", "admin", "all" or a comma list of
// them ("read,write"). An unknown word is an error naming it.
func ParsePermission(s string) (Permission, error) {
	var p Permission
	for _, w := range strings.Split(s, ",") {
		w = strings.TrimSpace(strings.ToLower(w))
		switch w {
		case "read":
			p |= Read
		case "write":
			p |= Write
		case "admin":
			p |= Admin
		case "all":
			p |= All
		default:
			return 0, fmt.Errorf("acl: unknown permission %q (want read, write, admin or all)", w)
		}
	}
	return p, nil
}

// MarshalJSON writes the permission as its list of names.
func (p Permission) MarshalJSON() ([]byte, error) {
	names := []string{}
	for _, n := range permNames {
		if p&n.p != 0 {
			names = append(names, n.name)
		}
	}
	return json.Marshal(names)
}

// UnmarshalJSON reads a list of names.
func (p *Permission) UnmarshalJSON(b []byte) error {
	var names []string
	if err := json.Unmarshal(b, &names); err != nil {
		return err
	}
	*p = 0
	for _, n := range names {
		q, err := ParsePermission(n)
		if err != nil {
			return err
		}
		*p |= q
	}
	return nil
}

// Member kinds.
const (
	UserPrefix  = "user:"
	GroupPrefix = "group:"
)

// User returns the member string of a principal.
func User(principal string) string { return UserPrefix + principal }

// Group returns the member string of a group.
func Group(group string) string { return GroupPrefix + group }

// ValidateMember checks that m is "user:NAME" or "group:NAME" with a
// non-empty NAME free of spaces and control characters.
func ValidateMember(m string) error {
	var name string
	switch {
	case strings.HasPrefix(m, UserPrefix):
		name = m[len(UserPrefix):]
	case strings.HasPrefix(m, GroupPrefix):
		name = m[len(GroupPrefix):]
	default:
		return fmt.Errorf("acl: member %q must be user:NAME or group:NAME", m)
	}
	if name == "" {
		return fmt.Errorf("acl: member %q has an empty name", m)
	}
	for _, r := range name {
		if r <= ' ' || r == 0x7f {
			return fmt.Errorf("acl: member %q contains a space or control character", m)
		}
	}
	return nil
}

// Grant gives Perms on Family ("" = the whole table) to Member.
type Grant struct {
	Member string     `json:"member"`
	Family string     `json:"family,omitempty"`
	Perms  Permission `json:"perms"`
}

// Policy is a table's grants. The zero Policy grants nothing.
type Policy struct {
	Grants []Grant `json:"grants,omitempty"`
}

// Subject is who asks: an authenticated principal and its groups.
type Subject struct {
	Principal string
	Groups    []string
}

// matches reports whether member names s (its principal or a group).
func (s Subject) matches(member string) bool {
	if name, ok := strings.CutPrefix(member, UserPrefix); ok {
		return name == s.Principal
	}
	if name, ok := strings.CutPrefix(member, GroupPrefix); ok {
		return slices.Contains(s.Groups, name)
	}
	return false
}

// IsSuperuser reports whether s is one of superusers (members).
func IsSuperuser(s Subject, superusers []string) bool {
	for _, m := range superusers {
		if s.matches(m) {
			return true
		}
	}
	return false
}

// Validate checks every grant: a valid member, a family name of Cloud
// Bigtable's alphabet ([-_.a-zA-Z0-9], at most 64 bytes), some
// permission, Admin only table-wide, and no two grants of one member and
// family (Grant merges them).
func (p Policy) Validate() error {
	seen := map[[2]string]bool{}
	for i, g := range p.Grants {
		if err := ValidateMember(g.Member); err != nil {
			return fmt.Errorf("grants[%d]: %w", i, err)
		}
		if err := ValidateFamily(g.Family); err != nil {
			return fmt.Errorf("grants[%d]: %w", i, err)
		}
		if g.Perms == 0 || g.Perms&^All != 0 {
			return fmt.Errorf("grants[%d]: acl: no valid permission", i)
		}
		if g.Family != "" && g.Perms&Admin != 0 {
			return fmt.Errorf("grants[%d]: acl: admin is table-wide; it cannot be granted on family %q", i, g.Family)
		}
		k := [2]string{g.Member, g.Family}
		if seen[k] {
			return fmt.Errorf("grants[%d]: acl: a second grant to %s on %s", i, g.Member, familyLabel(g.Family))
		}
		seen[k] = true
	}
	return nil
}

// ValidateFamily checks a family name ("" is the whole table).
func ValidateFamily(f string) error {
	if len(f) > 64 {
		return fmt.Errorf("acl: family %q is longer than 64 bytes", f)
	}
	for i := 0; i < len(f); i++ {
		c := f[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Errorf("acl: family %q must match [-_.a-zA-Z0-9]+", f)
		}
	}
	return nil
}

func familyLabel(f string) string {
	if f == "" {
		return "the whole table"
	}
	return "family " + f
}

// Allows reports whether s may exercise want on family ("" asks for the
// whole table: only table-wide grants count).
func (p Policy) Allows(s Subject, want Permission, family string) bool {
	var have Permission
	for _, g := range p.Grants {
		if (g.Family == "" || g.Family == family) && s.matches(g.Member) {
			have |= g.Perms
		}
	}
	return have.Has(want)
}

// AllowsSome reports whether s may exercise want on the whole table or on
// at least one family: what row keys alone (SampleRowKeys) or the schema
// (GetTable) need.
func (p Policy) AllowsSome(s Subject, want Permission) bool {
	for _, g := range p.Grants {
		if s.matches(g.Member) {
			if p.Allows(s, want, g.Family) {
				return true
			}
		}
	}
	return false
}

// Families returns which of families s may exercise want on, in the order
// given, and whether that is all of them.
func (p Policy) Families(s Subject, want Permission, families []string) (allowed []string, all bool) {
	if p.Allows(s, want, "") {
		return slices.Clone(families), true
	}
	for _, f := range families {
		if p.Allows(s, want, f) {
			allowed = append(allowed, f)
		}
	}
	return allowed, len(allowed) == len(families)
}

// Check returns nil if s may exercise want on every family of families,
// else a *DeniedError naming the first (in sorted order) it may not.
func (p Policy) Check(s Subject, want Permission, families []string) error {
	sorted := slices.Clone(families)
	sort.Strings(sorted)
	for _, f := range slices.Compact(sorted) {
		if !p.Allows(s, want, f) {
			return &DeniedError{Principal: s.Principal, Want: want, Family: f}
		}
	}
	return nil
}

// DeniedError says which right on which family was missing.
type DeniedError struct {
	Principal string
	Want      Permission
	Family    string // "" = the whole table
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("%s has no %s permission on %s", e.Principal, e.Want, familyLabel(e.Family))
}

// With returns a copy of p with perms added to member on family (merged
// into an existing grant of the same member and family). The result is
// validated.
func (p Policy) With(member, family string, perms Permission) (Policy, error) {
	out := Policy{Grants: slices.Clone(p.Grants)}
	found := false
	for i := range out.Grants {
		if out.Grants[i].Member == member && out.Grants[i].Family == family {
			out.Grants[i].Perms |= perms
			found = true
		}
	}
	if !found {
		out.Grants = append(out.Grants, Grant{Member: member, Family: family, Perms: perms})
	}
	out.normalize()
	return out, out.Validate()
}

// Without returns a copy of p with perms taken from member on family;
// a grant left with no permission is removed. Taking Admin from a grant
// leaves its Read and Write (revoke "all" to remove it). Revoking what was
// never granted is not an error (the result is p).
func (p Policy) Without(member, family string, perms Permission) Policy {
	out := Policy{}
	for _, g := range p.Grants {
		if g.Member == member && g.Family == family {
			g.Perms &^= perms
			if g.Perms == 0 {
				continue
			}
		}
		out.Grants = append(out.Grants, g)
	}
	out.normalize()
	return out
}

// normalize sorts the grants by member, then family.
func (p *Policy) normalize() {
	slices.SortFunc(p.Grants, func(a, b Grant) int {
		if c := strings.Compare(a.Member, b.Member); c != 0 {
			return c
		}
		return strings.Compare(a.Family, b.Family)
	})
}

// Members returns the members named by p's grants, sorted, once each.
func (p Policy) Members() []string {
	var out []string
	for _, g := range p.Grants {
		out = append(out, g.Member)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// WithoutFamily returns a copy of p without the grants on family (a family
// dropped from the table).
func (p Policy) WithoutFamily(family string) Policy {
	out := Policy{}
	for _, g := range p.Grants {
		if family == "" || g.Family != family {
			out.Grants = append(out.Grants, g)
		}
	}
	return out
}
