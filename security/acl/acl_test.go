package acl

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

var (
	alice = Subject{Principal: "alice", Groups: []string{"eng"}}
	bob   = Subject{Principal: "bob", Groups: []string{"ops"}}
	carol = Subject{Principal: "carol"}
)

func mustPolicy(t *testing.T, grants ...Grant) Policy {
	t.Helper()
	p := Policy{Grants: grants}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAllows(t *testing.T) {
	p := mustPolicy(t,
		Grant{Member: "user:alice", Family: "profile", Perms: Read},
		Grant{Member: "group:eng", Family: "activity", Perms: Read | Write},
		Grant{Member: "group:ops", Perms: Admin},
	)
	cases := []struct {
		who    Subject
		want   Permission
		family string
		ok     bool
	}{
		{alice, Read, "profile", true},
		{alice, Write, "profile", false},
		{alice, Read, "activity", true}, // through group eng
		{alice, Write, "activity", true},
		{alice, Read, "secret", false},
		{alice, Read, "", false}, // no table-wide grant
		{alice, Admin, "", false},
		{bob, Read, "secret", true}, // admin implies read, table-wide covers every family
		{bob, Write, "profile", true},
		{bob, Admin, "", true},
		{bob, Read | Write, "", true},
		{carol, Read, "profile", false},
		{alice, 0, "profile", false}, // asking for nothing is not a grant
	}
	for _, c := range cases {
		if got := p.Allows(c.who, c.want, c.family); got != c.ok {
			t.Errorf("Allows(%s, %s, %q) = %v, want %v", c.who.Principal, c.want, c.family, got, c.ok)
		}
	}
	if !p.AllowsSome(alice, Read) || p.AllowsSome(carol, Read) || !p.AllowsSome(alice, Write) || p.AllowsSome(alice, Admin) {
		t.Error("AllowsSome wrong")
	}
}

func TestFamiliesAndCheck(t *testing.T) {
	p := mustPolicy(t,
		Grant{Member: "user:alice", Family: "a", Perms: Read},
		Grant{Member: "user:bob", Perms: Read},
	)
	fams := []string{"a", "b"}
	cases := []struct {
		who     Subject
		allowed []string
		all     bool
	}{
		{alice, []string{"a"}, false},
		{bob, []string{"a", "b"}, true},
		{carol, nil, false},
	}
	for _, c := range cases {
		got, all := p.Families(c.who, Read, fams)
		if !reflect.DeepEqual(got, c.allowed) || all != c.all {
			t.Errorf("Families(%s) = %v %v, want %v %v", c.who.Principal, got, all, c.allowed, c.all)
		}
	}
	err := p.Check(alice, Read, []string{"b", "a", "b"})
	var d *DeniedError
	if !errors.As(err, &d) || d.Family != "b" || d.Principal != "alice" || !strings.Contains(err.Error(), "family b") {
		t.Fatalf("Check = %v", err)
	}
	if err := p.Check(alice, Read, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	if err := p.Check(bob, Write, []string{"a"}); err == nil {
		t.Fatal("bob may not write")
	}
}

func TestSuperuser(t *testing.T) {
	su := []string{"user:root", "group:admins"}
	cases := []struct {
		who Subject
		ok  bool
	}{
		{Subject{Principal: "root"}, true},
		{Subject{Principal: "x", Groups: []string{"admins"}}, true},
		{Subject{Principal: "admins"}, false}, // a user named like the group is not in it
		{alice, false},
	}
	for _, c := range cases {
		if got := IsSuperuser(c.who, su); got != c.ok {
			t.Errorf("IsSuperuser(%+v) = %v", c.who, got)
		}
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		g   []Grant
		err string
	}{
		{[]Grant{{Member: "alice", Perms: Read}}, "user:NAME or group:NAME"},
		{[]Grant{{Member: "user:", Perms: Read}}, "empty name"},
		{[]Grant{{Member: "user:a b", Perms: Read}}, "space"},
		{[]Grant{{Member: "user:a", Family: "bad/family", Perms: Read}}, "must match"},
		{[]Grant{{Member: "user:a", Perms: 0}}, "no valid permission"},
		{[]Grant{{Member: "user:a", Family: "f", Perms: Admin}}, "table-wide"},
		{[]Grant{{Member: "user:a", Perms: Read}, {Member: "user:a", Perms: Write}}, "second grant"},
		{[]Grant{{Member: "user:a", Perms: Read}, {Member: "user:a", Family: "f", Perms: Write}}, ""},
	}
	for i, c := range cases {
		err := Policy{Grants: c.g}.Validate()
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%d: Validate = %v, want %q", i, err, c.err)
		}
	}
}

func TestWithWithout(t *testing.T) {
	var p Policy
	p, err := p.With("user:bob", "", Read)
	if err != nil {
		t.Fatal(err)
	}
	if p, err = p.With("user:alice", "f", Write); err != nil {
		t.Fatal(err)
	}
	if p, err = p.With("user:bob", "", Write); err != nil {
		t.Fatal(err)
	}
	want := []Grant{{Member: "user:alice", Family: "f", Perms: Write}, {Member: "user:bob", Perms: Read | Write}}
	if !reflect.DeepEqual(p.Grants, want) {
		t.Fatalf("With: %+v", p.Grants)
	}
	if _, err := p.With("user:bob", "f", Admin); err == nil {
		t.Fatal("admin on a family accepted")
	}
	p = p.Without("user:bob", "", Write)
	if !p.Allows(bob, Read, "x") || p.Allows(bob, Write, "x") {
		t.Fatalf("Without write: %+v", p.Grants)
	}
	p = p.Without("user:bob", "", All)
	p = p.Without("user:nobody", "", All) // revoking nothing is fine
	if !reflect.DeepEqual(p.Members(), []string{"user:alice"}) {
		t.Fatalf("members %v", p.Members())
	}
}

func TestJSON(t *testing.T) {
	p := mustPolicy(t, Grant{Member: "user:a", Family: "f", Perms: Read | Write}, Grant{Member: "group:g", Perms: Admin})
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"perms":["read","write"]`) {
		t.Fatalf("json %s", b)
	}
	var q Policy
	if err := json.Unmarshal(b, &q); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p, q) {
		t.Fatalf("round trip %+v != %+v", q, p)
	}
	if err := json.Unmarshal([]byte(`{"grants":[{"member":"user:a","perms":["root"]}]}`), &q); err == nil || !strings.Contains(err.Error(), `"root"`) {
		t.Fatalf("unknown permission: %v", err)
	}
}

func TestParsePermission(t *testing.T) {
	cases := map[string]Permission{"read": Read, "READ, write": Read | Write, "admin": Admin, "all": All}
	for in, want := range cases {
		if got, err := ParsePermission(in); err != nil || got != want {
			t.Errorf("ParsePermission(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParsePermission("owner"); err == nil || !strings.Contains(err.Error(), "owner") {
		t.Errorf("owner: %v", err)
	}
}

func TestIAMRoundTrip(t *testing.T) {
	p := mustPolicy(t,
		Grant{Member: "user:a", Perms: Read},
		Grant{Member: "user:b", Perms: Read | Write},
		Grant{Member: "group:g", Perms: Admin},
		Grant{Member: "user:c", Family: "f", Perms: Read},
		Grant{Member: "user:d", Family: "f", Perms: Write},
	)
	p.normalize()
	bs := p.Bindings()
	want := []Binding{
		{Role: RoleAdmin, Members: []string{"group:g"}},
		{Role: RoleReader, Members: []string{"user:a"}},
		{Role: RoleUser, Members: []string{"user:b"}},
		{Role: RoleReader, Members: []string{"user:c"}, Family: "f"},
		{Role: RoleWriter, Members: []string{"user:d"}, Family: "f"},
	}
	if !reflect.DeepEqual(bs, want) {
		t.Fatalf("Bindings = %+v", bs)
	}
	q, err := FromBindings(bs)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p, q) {
		t.Fatalf("FromBindings = %+v, want %+v", q, p)
	}
	// Union of roles of one member.
	q, err = FromBindings([]Binding{{Role: RoleReader, Members: []string{"user:a"}}, {Role: RoleWriter, Members: []string{"user:a"}}})
	if err != nil || !reflect.DeepEqual(q.Grants, []Grant{{Member: "user:a", Perms: Read | Write}}) {
		t.Fatalf("union: %+v %v", q, err)
	}
	bad := []struct {
		b   Binding
		err string
	}{
		{Binding{Role: "roles/owner", Members: []string{"user:a"}}, "roles/owner"},
		{Binding{Role: RoleAdmin, Members: []string{"user:a"}, Family: "f"}, "table-wide"},
		{Binding{Role: RoleReader, Members: []string{"allUsers"}}, "allUsers"},
	}
	for _, c := range bad {
		if _, err := FromBindings([]Binding{c.b}); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("FromBindings(%+v) = %v, want %q", c.b, err, c.err)
		}
	}
}

func TestFamilyCondition(t *testing.T) {
	f, err := ParseFamilyCondition(FamilyCondition("cf.1"))
	if err != nil || f != "cf.1" {
		t.Fatalf("%q %v", f, err)
	}
	for _, e := range []string{`resource.name == "x"`, `resource.family == "a" || true`, ``} {
		if _, err := ParseFamilyCondition(e); err == nil {
			t.Errorf("%q accepted", e)
		}
	}
}

func TestIAMPermission(t *testing.T) {
	cases := map[string]Permission{"bigtable.tables.readRows": Read, "bigtable.tables.mutateRows": Write, "bigtable.tables.setIamPolicy": Admin}
	for perm, want := range cases {
		if got, ok := IAMPermission(perm); !ok || got != want {
			t.Errorf("%s: %v %v", perm, got, ok)
		}
	}
	if _, ok := IAMPermission("bigtable.instances.delete"); ok {
		t.Error("unknown permission known")
	}
}
