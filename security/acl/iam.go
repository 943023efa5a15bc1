package acl

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
)

// Cloud Bigtable's IAM roles on a table, and the grants they stand for.
// RoleWriter is Tabula's: Cloud Bigtable has no write-only role.
const (
	RoleReader = "roles/bigtable.reader" // Read
	RoleUser   = "roles/bigtable.user"   // Read and Write
	RoleAdmin  = "roles/bigtable.admin"  // Admin (and so Read and Write)
	RoleWriter = "roles/tabula.writer"   // Write
)

// RolePermission returns the permissions of an IAM role; an unknown role
// is an error naming it.
func RolePermission(role string) (Permission, error) {
	switch role {
	case RoleReader:
		return Read, nil
	case RoleUser:
		return Read | Write, nil
	case RoleAdmin:
		return Admin, nil
	case RoleWriter:
		return Write, nil
	}
	return 0, fmt.Errorf("acl: unknown role %q (want %s, %s, %s or %s)", role, RoleReader, RoleUser, RoleAdmin, RoleWriter)
}

// PermissionRole returns the role that grants exactly p (Admin wins).
func PermissionRole(p Permission) string {
	switch {
	case p&Admin != 0:
		return RoleAdmin
	case p.Has(Read | Write):
		return RoleUser
	case p.Has(Write):
		return RoleWriter
	default:
		return RoleReader
	}
}

// Binding is an IAM binding: a role for members, on the whole table or,
// with Family set, on one column family. In the IAM Policy message a
// family binding carries the condition FamilyCondition(family).
type Binding struct {
	Role    string
	Members []string
	Family  string
}

// FamilyCondition is the IAM condition expression of a family binding.
func FamilyCondition(family string) string { return `resource.family == "` + family + `"` }

var familyConditionRE = regexp.MustCompile(`^\s*resource\.family\s*==\s*"([-_.a-zA-Z0-9]+)"\s*$`)

// ParseFamilyCondition returns the family of a condition FamilyCondition
// wrote; any other expression is an error (Tabula evaluates no other
// conditions, and ignoring one would grant more than asked).
func ParseFamilyCondition(expr string) (string, error) {
	m := familyConditionRE.FindStringSubmatch(expr)
	if m == nil {
		return "", fmt.Errorf(`acl: condition %q is not supported (only resource.family == "NAME")`, expr)
	}
	return m[1], nil
}

// Bindings renders p as IAM bindings: one per role and family, members
// sorted; bindings sorted by family, then role.
func (p Policy) Bindings() []Binding {
	type key struct{ role, family string }
	m := map[key][]string{}
	for _, g := range p.Grants {
		k := key{PermissionRole(g.Perms), g.Family}
		m[k] = append(m[k], g.Member)
	}
	var out []Binding
	for k, members := range m {
		slices.Sort(members)
		out = append(out, Binding{Role: k.role, Members: members, Family: k.family})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Family != out[j].Family {
			return out[i].Family < out[j].Family
		}
		return out[i].Role < out[j].Role
	})
	return out
}

// FromBindings builds the policy IAM bindings describe (a member in several
// bindings of one family gets the union of their roles). It is validated.
func FromBindings(bindings []Binding) (Policy, error) {
	var p Policy
	for i, b := range bindings {
		perms, err := RolePermission(b.Role)
		if err != nil {
			return Policy{}, fmt.Errorf("bindings[%d]: %w", i, err)
		}
		if b.Family != "" && perms&Admin != 0 {
			return Policy{}, fmt.Errorf("bindings[%d]: acl: %s is table-wide; it cannot be bound on family %q", i, b.Role, b.Family)
		}
		for _, m := range b.Members {
			if err := ValidateMember(m); err != nil {
				return Policy{}, fmt.Errorf("bindings[%d]: %w", i, err)
			}
			if p, err = p.With(m, b.Family, perms); err != nil {
				return Policy{}, fmt.Errorf("bindings[%d]: %w", i, err)
			}
		}
	}
	return p, p.Validate()
}

// IAMPermission maps a Cloud Bigtable IAM permission on a table (as
// TestIamPermissions asks) to the right it needs; ok is false for a
// permission Tabula does not know (it is then never granted).
func IAMPermission(perm string) (p Permission, ok bool) {
	switch perm {
	case "bigtable.tables.readRows", "bigtable.tables.sampleRowKeys", "bigtable.tables.get",
		"bigtable.tables.checkConsistency", "bigtable.tables.generateConsistencyToken":
		return Read, true
	case "bigtable.tables.mutateRows":
		return Write, true
	case "bigtable.tables.update", "bigtable.tables.delete", "bigtable.tables.getIamPolicy",
		"bigtable.tables.setIamPolicy", "bigtable.tables.dropRowRange":
		return Admin, true
	}
	return 0, false
}
