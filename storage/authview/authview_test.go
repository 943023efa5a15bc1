package authview_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/tabuladb/tabula/storage/authview"

	"github.com/tabuladb/tabula/internal/devtest"
	"github.com/tabuladb/tabula/storage/cluster"
)

var srv *devtest.Server

func TestMain(m *testing.M) { os.Exit(devtest.Main(cluster.DevConfig{}, &srv, m.Run)) }

// dump renders rows as "row|family:qualifier=value", in order.
func dump(t *testing.T, read func(f func(bigtable.Row) bool) error) []string {
	t.Helper()
	var out []string
	err := read(func(r bigtable.Row) bool {
		for _, items := range r {
			for _, it := range items {
				out = append(out, fmt.Sprintf("%s|%s=%s", it.Row, it.Column, it.Value))
			}
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// setup creates a table with rows o, p1a, p1b, p2, q, qz, z, each with the
// columns a:x, a:y1, a:z, b:k and c:k (value "v"), and a view of rows
// p1* and q* with a:x, a:y* and all of b.
func setup(t *testing.T, table string) (tbl, av bigtable.TableAPI) {
	ctx := devtest.Context(t)
	srv.CreateTable(t, table, []string{"a", "b", "c"}, "m", "p1b", "q")
	tbl = srv.Data.Open(table)
	for _, row := range []string{"o", "p1a", "p1b", "p2", "q", "qz", "z"} {
		m := bigtable.NewMutation()
		for _, col := range []string{"a:x", "a:y1", "a:z", "b:k", "c:k"} {
			fam, q, _ := strings.Cut(col, ":")
			m.Set(fam, q, 1000, []byte("v"))
		}
		if err := tbl.Apply(ctx, row, m); err != nil {
			t.Fatal(err)
		}
	}
	err := srv.Admin.CreateAuthorizedView(ctx, &bigtable.AuthorizedViewConf{
		TableID: table, AuthorizedViewID: "v",
		AuthorizedView: &bigtable.SubsetViewConf{
			RowPrefixes: [][]byte{[]byte("p1"), []byte("q")},
			FamilySubsets: map[string]bigtable.FamilySubset{
				"a": {Qualifiers: [][]byte{[]byte("x")}, QualifierPrefixes: [][]byte{[]byte("y")}},
				"b": {QualifierPrefixes: [][]byte{[]byte("")}},
			},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return tbl, srv.Data.OpenAuthorizedView(table, "v")
}

// visible is what the view's user sees of a row of the seeded table.
func visible(rows ...string) []string {
	var out []string
	for _, r := range rows {
		for _, c := range []string{"a:x", "a:y1", "b:k"} {
			out = append(out, r+"|"+c+"=v")
		}
	}
	slices.Sort(out)
	return out
}

func TestReads(t *testing.T) {
	ctx := devtest.Context(t)
	_, av := setup(t, "reads")
	for _, tc := range []struct {
		name string
		rs   bigtable.RowSet
		opts []bigtable.ReadOption
		want []string
	}{
		{"whole table", bigtable.InfiniteRange(""), nil, visible("p1a", "p1b", "q", "qz")},
		{"range across the view", bigtable.NewRange("p", "qa"), nil, visible("p1a", "p1b", "q")},
		{"range outside", bigtable.NewRange("r", "zz"), nil, nil},
		{"keys in and out", bigtable.RowList{"o", "p1b", "p2", "qz"}, nil, visible("p1b", "qz")},
		{"prefix in", bigtable.PrefixRange("p1"), nil, visible("p1a", "p1b")},
		{"prefix out", bigtable.PrefixRange("p2"), nil, nil},
		{"filter sees only the view", bigtable.InfiniteRange(""), []bigtable.ReadOption{bigtable.RowFilter(bigtable.FamilyFilter("c"))}, nil},
		{"filter within the view", bigtable.InfiniteRange(""), []bigtable.ReadOption{bigtable.RowFilter(bigtable.ColumnFilter("y.*"))}, []string{"p1a|a:y1=v", "p1b|a:y1=v", "qz|a:y1=v", "q|a:y1=v"}},
		{"row limit counts view rows", bigtable.InfiniteRange(""), []bigtable.ReadOption{bigtable.LimitRows(1)}, visible("p1a")},
		{"cells per row limit over view cells", bigtable.RowList{"q"}, []bigtable.ReadOption{bigtable.RowFilter(bigtable.CellsPerRowLimitFilter(1))}, []string{"q|a:x=v"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := dump(t, func(f func(bigtable.Row) bool) error { return av.ReadRows(ctx, tc.rs, f, tc.opts...) })
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q\nwant %q", got, tc.want)
			}
		})
	}
	t.Run("ReadRow outside", func(t *testing.T) {
		r, err := av.ReadRow(ctx, "o")
		if err != nil || len(r) != 0 {
			t.Errorf("ReadRow(o) = %v, %v; want an empty row", r, err)
		}
	})
	t.Run("SampleRowKeys", func(t *testing.T) {
		keys, err := av.SampleRowKeys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		all, err := srv.Data.Open("reads").SampleRowKeys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Tablets end at m, p1b, q and the end: the view's rows lie in
		// the last three, and the first sample bounds rows outside it.
		if want := []string{"m", "p1b", "q"}; !slices.Equal(all, want) {
			t.Fatalf("table samples %q, want %q", all, want)
		}
		if want := []string{"p1b", "q"}; !slices.Equal(keys, want) {
			t.Errorf("view samples %q, want %q", keys, want)
		}
	})
}

func TestWrites(t *testing.T) {
	ctx := devtest.Context(t)
	tbl, av := setup(t, "writes")
	all := func() []string {
		return dump(t, func(f func(bigtable.Row) bool) error { return tbl.ReadRows(ctx, bigtable.InfiniteRange(""), f) })
	}
	set := func(fam, col string) *bigtable.Mutation {
		m := bigtable.NewMutation()
		m.Set(fam, col, 2000, []byte("w"))
		return m
	}
	del := func(f func(m *bigtable.Mutation)) *bigtable.Mutation { m := bigtable.NewMutation(); f(m); return m }
	type write struct {
		name string
		do   func() error
		// code is the status wanted; OK: the change must show in the
		// table as changed (a cell "row|col=value" present or, with
		// "-", absent), else the table must be unchanged.
		code    codes.Code
		changed string
	}
	for _, tc := range []write{
		{"MutateRow in the view", func() error { return av.Apply(ctx, "p1a", set("a", "x")) }, codes.OK, "p1a|a:x=w"},
		{"MutateRow qualifier prefix", func() error { return av.Apply(ctx, "q", set("a", "y9")) }, codes.OK, "q|a:y9=w"},
		{"MutateRow whole family", func() error { return av.Apply(ctx, "qz", set("b", "new")) }, codes.OK, "qz|b:new=w"},
		{"MutateRow row outside", func() error { return av.Apply(ctx, "p2", set("a", "x")) }, codes.PermissionDenied, ""},
		{"MutateRow column outside", func() error { return av.Apply(ctx, "p1a", set("a", "z")) }, codes.PermissionDenied, ""},
		{"MutateRow family outside", func() error { return av.Apply(ctx, "p1a", set("c", "k")) }, codes.PermissionDenied, ""},
		{"MutateRow one bad mutation refuses all", func() error {
			m := set("a", "x")
			m.Set("c", "k", 2000, []byte("w"))
			return av.Apply(ctx, "p1b", m)
		}, codes.PermissionDenied, ""},
		{"DeleteCellsInColumn in the view", func() error {
			return av.Apply(ctx, "p1b", del(func(m *bigtable.Mutation) { m.DeleteCellsInColumn("a", "y1") }))
		}, codes.OK, "-p1b|a:y1=v"},
		{"DeleteCellsInColumn outside", func() error {
			return av.Apply(ctx, "p1b", del(func(m *bigtable.Mutation) { m.DeleteCellsInColumn("a", "z") }))
		}, codes.PermissionDenied, ""},
		{"DeleteCellsInFamily whole family", func() error {
			return av.Apply(ctx, "q", del(func(m *bigtable.Mutation) { m.DeleteCellsInFamily("b") }))
		}, codes.OK, "-q|b:k=v"},
		{"DeleteCellsInFamily partly covered", func() error {
			return av.Apply(ctx, "q", del(func(m *bigtable.Mutation) { m.DeleteCellsInFamily("a") }))
		}, codes.PermissionDenied, ""},
		{"DeleteRow", func() error { return av.Apply(ctx, "q", del(func(m *bigtable.Mutation) { m.DeleteRow() })) }, codes.PermissionDenied, ""},
		{"CheckAndMutateRow true branch", func() error {
			return av.Apply(ctx, "p1a", bigtable.NewCondMutation(bigtable.ColumnFilter("x"), set("b", "cond"), nil))
		}, codes.OK, "p1a|b:cond=w"},
		{"CheckAndMutateRow predicate sees only the view", func() error {
			// c:k exists in the row but not in the view: the false
			// branch runs.
			return av.Apply(ctx, "p1b", bigtable.NewCondMutation(bigtable.FamilyFilter("c"), set("b", "t"), set("b", "f")))
		}, codes.OK, "p1b|b:f=w"},
		{"CheckAndMutateRow branch outside", func() error {
			return av.Apply(ctx, "p1a", bigtable.NewCondMutation(bigtable.ColumnFilter("x"), set("b", "ok"), set("c", "k")))
		}, codes.PermissionDenied, ""},
		{"CheckAndMutateRow row outside", func() error {
			return av.Apply(ctx, "z", bigtable.NewCondMutation(nil, set("a", "x"), nil))
		}, codes.PermissionDenied, ""},
		{"ReadModifyWriteRow in the view", func() error {
			rmw := bigtable.NewReadModifyWrite()
			rmw.AppendValue("a", "x", []byte("+"))
			r, err := av.ApplyReadModifyWrite(ctx, "qz", rmw)
			if err == nil && (len(r["a"]) != 1 || string(r["a"][0].Value) != "v+") {
				return fmt.Errorf("returned %v", r)
			}
			return err
		}, codes.OK, "qz|a:x=v+"},
		{"ReadModifyWriteRow column outside", func() error {
			rmw := bigtable.NewReadModifyWrite()
			rmw.AppendValue("c", "k", []byte("+"))
			_, err := av.ApplyReadModifyWrite(ctx, "qz", rmw)
			return err
		}, codes.PermissionDenied, ""},
		{"ReadModifyWriteRow row outside", func() error {
			rmw := bigtable.NewReadModifyWrite()
			rmw.AppendValue("a", "x", []byte("+"))
			_, err := av.ApplyReadModifyWrite(ctx, "o", rmw)
			return err
		}, codes.PermissionDenied, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := all()
			err := tc.do()
			if got := status.Code(err); got != tc.code {
				t.Fatalf("code %v (%v), want %v", got, err, tc.code)
			}
			after := all()
			if tc.code != codes.OK {
				if !slices.Equal(before, after) {
					t.Fatalf("a refused write changed the table:\nbefore %q\nafter  %q", before, after)
				}
				if !strings.Contains(err.Error(), "outside") && !strings.Contains(err.Error(), "does not cover") {
					t.Errorf("error %v does not say what is outside the view", err)
				}
				return
			}
			want, absent := strings.CutPrefix(tc.changed, "-")
			if slices.Contains(after, want) == absent {
				t.Fatalf("after the write, %q present = %v, want %v:\n%q", want, absent, !absent, after)
			}
		})
	}

	t.Run("MutateRows entry by entry", func(t *testing.T) {
		before := all()
		errs, err := av.ApplyBulk(ctx, []string{"p1a", "p2", "q", "qz"},
			[]*bigtable.Mutation{set("a", "bulk"), set("a", "x"), set("c", "k"), set("b", "bulk")})
		if err != nil {
			t.Fatal(err)
		}
		// a:bulk is not in the view (a has x and y* only).
		wantCodes := []codes.Code{codes.PermissionDenied, codes.PermissionDenied, codes.PermissionDenied, codes.OK}
		for i, want := range wantCodes {
			var e error
			if errs != nil {
				e = errs[i]
			}
			if status.Code(e) != want {
				t.Errorf("entry %d: %v, want %v", i, e, want)
			}
		}
		after := all()
		var added []string
		for _, c := range after {
			if !slices.Contains(before, c) {
				added = append(added, c)
			}
		}
		if want := []string{"qz|b:bulk=w"}; !slices.Equal(added, want) {
			t.Errorf("cells added %q, want %q", added, want)
		}
	})
}

func TestAdmin(t *testing.T) {
	ctx := devtest.Context(t)
	setup(t, "admin")
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	adm := adminpb.NewBigtableTableAdminClient(conn)
	table := "projects/" + devtest.Project + "/instances/" + devtest.Instance + "/tables/admin"
	view := func(prefix string, fams map[string]*adminpb.AuthorizedView_FamilySubsets) *adminpb.AuthorizedView {
		return &adminpb.AuthorizedView{AuthorizedView: &adminpb.AuthorizedView_SubsetView_{SubsetView: &adminpb.AuthorizedView_SubsetView{
			RowPrefixes: [][]byte{[]byte(prefix)}, FamilySubsets: fams}}}
	}
	whole := map[string]*adminpb.AuthorizedView_FamilySubsets{"b": {QualifierPrefixes: [][]byte{{}}}}

	// Bad input: the right code, naming the field, and nothing created.
	for _, tc := range []struct {
		name  string
		req   *adminpb.CreateAuthorizedViewRequest
		code  codes.Code
		field string
	}{
		{"family outside the table", &adminpb.CreateAuthorizedViewRequest{Parent: table, AuthorizedViewId: "bad",
			AuthorizedView: view("p", map[string]*adminpb.AuthorizedView_FamilySubsets{"nope": {Qualifiers: [][]byte{[]byte("x")}}})},
			codes.InvalidArgument, `authorized_view.subset_view.family_subsets["nope"]`},
		{"empty family subset", &adminpb.CreateAuthorizedViewRequest{Parent: table, AuthorizedViewId: "bad",
			AuthorizedView: view("p", map[string]*adminpb.AuthorizedView_FamilySubsets{"a": {}})},
			codes.InvalidArgument, `authorized_view.subset_view.family_subsets["a"]`},
		{"no subset view", &adminpb.CreateAuthorizedViewRequest{Parent: table, AuthorizedViewId: "bad", AuthorizedView: &adminpb.AuthorizedView{}},
			codes.InvalidArgument, "authorized_view.subset_view"},
		{"bad id", &adminpb.CreateAuthorizedViewRequest{Parent: table, AuthorizedViewId: "-x", AuthorizedView: view("p", whole)},
			codes.InvalidArgument, "authorized_view_id"},
		{"unknown table", &adminpb.CreateAuthorizedViewRequest{Parent: table + "nope", AuthorizedViewId: "bad", AuthorizedView: view("p", whole)},
			codes.NotFound, "adminnope"},
		{"exists", &adminpb.CreateAuthorizedViewRequest{Parent: table, AuthorizedViewId: "v", AuthorizedView: view("p", whole)},
			codes.AlreadyExists, "authorizedViews/v"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := adm.CreateAuthorizedView(ctx, tc.req)
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("got %v, want %v naming %s", err, tc.code, tc.field)
			}
		})
	}
	list, err := srv.Admin.AuthorizedViews(ctx, "admin")
	if err != nil || !slices.Equal(list, []string{"v"}) {
		t.Fatalf("views %q, %v; want only v", list, err)
	}

	// Deletion protection, etags, updates.
	op, err := adm.CreateAuthorizedView(ctx, &adminpb.CreateAuthorizedViewRequest{Parent: table, AuthorizedViewId: "p", AuthorizedView: func() *adminpb.AuthorizedView {
		v := view("q", whole)
		v.DeletionProtection = true
		return v
	}()})
	if err != nil || !op.GetDone() {
		t.Fatalf("create: %v, %v", op, err)
	}
	name := table + "/authorizedViews/p"
	got, err := adm.GetAuthorizedView(ctx, &adminpb.GetAuthorizedViewRequest{Name: name, View: adminpb.AuthorizedView_FULL})
	if err != nil || !got.GetDeletionProtection() || got.GetEtag() == "" || string(got.GetSubsetView().GetRowPrefixes()[0]) != "q" {
		t.Fatalf("get: %v, %v", got, err)
	}
	if _, err := adm.DeleteAuthorizedView(ctx, &adminpb.DeleteAuthorizedViewRequest{Name: name}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("deleting a protected view: %v, want FAILED_PRECONDITION", err)
	}
	if err := srv.Admin.DeleteTable(ctx, "admin"); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("deleting the table of a protected view: %v, want FAILED_PRECONDITION", err)
	}
	upd := &adminpb.UpdateAuthorizedViewRequest{AuthorizedView: &adminpb.AuthorizedView{Name: name, Etag: "stale", DeletionProtection: false},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"deletion_protection"}}}
	if _, err := adm.UpdateAuthorizedView(ctx, upd); status.Code(err) != codes.Aborted {
		t.Errorf("update with a stale etag: %v, want ABORTED", err)
	}
	upd.AuthorizedView.Etag = got.GetEtag()
	if _, err := adm.UpdateAuthorizedView(ctx, upd); err != nil {
		t.Fatalf("update: %v", err)
	}
	after, err := adm.GetAuthorizedView(ctx, &adminpb.GetAuthorizedViewRequest{Name: name, View: adminpb.AuthorizedView_FULL})
	if err != nil || after.GetDeletionProtection() || after.GetEtag() == got.GetEtag() || string(after.GetSubsetView().GetRowPrefixes()[0]) != "q" {
		t.Fatalf("after update: %v, %v (the subset must stay, the etag change)", after, err)
	}
	if _, err := adm.DeleteAuthorizedView(ctx, &adminpb.DeleteAuthorizedViewRequest{Name: name, Etag: got.GetEtag()}); status.Code(err) != codes.Aborted {
		t.Errorf("delete with a stale etag: %v, want ABORTED", err)
	}
	if _, err := adm.DeleteAuthorizedView(ctx, &adminpb.DeleteAuthorizedViewRequest{Name: name}); err != nil {
		t.Fatal(err)
	}
	// A deleted view is not found by the data API once the cache expires.
	time.Sleep(authview.DefaultCacheTTL + 100*time.Millisecond)
	_, err = srv.Data.OpenAuthorizedView("admin", "p").ReadRow(ctx, "q")
	if status.Code(err) != codes.NotFound {
		t.Errorf("reading through a deleted view: %v, want NOT_FOUND", err)
	}
}
