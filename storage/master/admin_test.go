package master

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

func TestCreateTableFromConf(t *testing.T) {
	e := newEnv(t)
	conf := &bigtable.TableConf{
		TableID:   "web",
		SplitKeys: []string{"m", "c", "x", "m"}, // unsorted, with a duplicate
		Families: map[string]bigtable.GCPolicy{
			"plain":    bigtable.NoGcPolicy(),
			"versions": bigtable.MaxVersionsPolicy(3),
			"age":      bigtable.MaxAgePolicy(48 * time.Hour),
			"union":    bigtable.UnionPolicy(bigtable.MaxVersionsPolicy(2), bigtable.MaxAgePolicy(time.Hour)),
			"inter":    bigtable.IntersectionPolicy(bigtable.MaxVersionsPolicy(5), bigtable.MaxAgePolicy(24*time.Hour)),
			"nested": bigtable.UnionPolicy(bigtable.MaxVersionsPolicy(10),
				bigtable.IntersectionPolicy(bigtable.MaxVersionsPolicy(1), bigtable.MaxAgePolicy(time.Hour))),
		},
		DeletionProtection: bigtable.Protected,
	}
	if err := e.admin.CreateTableFromConf(e.ctx, conf); err != nil {
		t.Fatal(err)
	}

	// The catalog entry: splits sorted and deduplicated into four tablets
	// with unique IDs, and the engine's GC policies.
	entry, err := e.catalog.Get(e.ctx, meta.TableID{Instance: testInstance, Table: "web"})
	if err != nil {
		t.Fatal(err)
	}
	var bounds []string
	ids := map[string]bool{}
	for _, ref := range entry.Tablets {
		bounds = append(bounds, string(ref.Start)+".."+string(ref.End))
		ids[ref.ID] = true
		if err := tablet.ValidateID(ref.ID); err != nil {
			t.Errorf("tablet id: %v", err)
		}
	}
	if want := []string{"..c", "c..m", "m..x", "x.."}; !slices.Equal(bounds, want) {
		t.Fatalf("tablets %v, want %v", bounds, want)
	}
	if len(ids) != 4 {
		t.Fatalf("tablet IDs not unique: %v", entry.Tablets)
	}
	wantGC := map[string]tabletdesc.GCPolicy{
		"plain":    {},
		"versions": {MaxVersions: 3},
		"age":      {MaxAge: 48 * time.Hour},
		"union":    {Union: []tabletdesc.GCPolicy{{MaxVersions: 2}, {MaxAge: time.Hour}}},
		"inter":    {Intersection: []tabletdesc.GCPolicy{{MaxVersions: 5}, {MaxAge: 24 * time.Hour}}},
		"nested": {Union: []tabletdesc.GCPolicy{{MaxVersions: 10},
			{Intersection: []tabletdesc.GCPolicy{{MaxVersions: 1}, {MaxAge: time.Hour}}}}},
	}
	if len(entry.Families) != len(wantGC) {
		t.Fatalf("families %v", entry.Families)
	}
	for name, want := range wantGC {
		if got := entry.Families[name].GC; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("family %s: GC %+v, want %+v", name, got, want)
		}
	}
	if !entry.DeletionProtection || entry.Granularity != meta.GranularityMillis {
		t.Errorf("protection %v granularity %v", entry.DeletionProtection, entry.Granularity)
	}
	// The tablets were opened with exactly that entry.
	if open, ok := e.control.Open(entry.ID); !ok || len(open.Tablets) != 4 || open.Generation != entry.Generation {
		t.Fatalf("control has %+v (open %v)", open, ok)
	}

	// TableInfo sees what was created, GC policies included.
	info, err := e.admin.TableInfo(e.ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	if info.DeletionProtection != bigtable.Protected {
		t.Errorf("TableInfo protection %v", info.DeletionProtection)
	}
	got := map[string]string{}
	for _, fi := range info.FamilyInfos {
		got[fi.Name] = fi.FullGCPolicy.String()
	}
	for name, p := range conf.Families {
		if got[name] != p.String() {
			t.Errorf("family %s: TableInfo policy %q, want %q", name, got[name], p.String())
		}
	}

	// A second creation is ALREADY_EXISTS and changes nothing.
	err = e.admin.CreateTable(e.ctx, "web")
	wantCode(t, "second CreateTable", err, codes.AlreadyExists)
	again, _ := e.catalog.Get(e.ctx, entry.ID)
	if again.Generation != entry.Generation || len(again.Families) != len(entry.Families) {
		t.Fatalf("entry changed by a failed create: %+v", again)
	}
}

func TestCreateTableErrors(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name string
		conf *bigtable.TableConf
		code codes.Code
		msg  string
	}{
		{"bad table id", &bigtable.TableConf{TableID: "-bad"}, codes.InvalidArgument, "table_id"},
		{"long table id", &bigtable.TableConf{TableID: strings.Repeat("t", 51)}, codes.InvalidArgument, "50"},
		{"empty split", &bigtable.TableConf{TableID: "t1", SplitKeys: []string{"a", ""}}, codes.InvalidArgument, "initial_splits[1].key"},
		{"bad family", &bigtable.TableConf{TableID: "t2", Families: map[string]bigtable.GCPolicy{"a:b": bigtable.NoGcPolicy()}}, codes.InvalidArgument, "column_families"},
		{"zero versions", &bigtable.TableConf{TableID: "t3", Families: map[string]bigtable.GCPolicy{"f": bigtable.MaxVersionsPolicy(0)}}, codes.InvalidArgument, "max_num_versions"},
		{"tiny age", &bigtable.TableConf{TableID: "t4", Families: map[string]bigtable.GCPolicy{"f": bigtable.MaxAgePolicy(time.Microsecond)}}, codes.InvalidArgument, "max_age"},
		{"empty intersection", &bigtable.TableConf{TableID: "t5", Families: map[string]bigtable.GCPolicy{"f": bigtable.IntersectionPolicy()}}, codes.InvalidArgument, "intersection"},
		{"change stream", &bigtable.TableConf{TableID: "t6", ChangeStreamRetention: 24 * time.Hour}, codes.Unimplemented, "change_stream_config"},
	}
	for _, c := range cases {
		err := e.admin.CreateTableFromConf(e.ctx, c.conf)
		wantCode(t, c.name, err, c.code)
		if !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: error %q does not name %q", c.name, err, c.msg)
		}
	}
	tables, err := e.admin.Tables(e.ctx)
	if err != nil || len(tables) != 0 {
		t.Fatalf("failed creates left tables %v (%v)", tables, err)
	}
	if calls := e.control.Calls(); len(calls) != 0 {
		t.Fatalf("failed creates reached the tablets: %v", calls)
	}

	// Too many splits, bad parent and granularity, through the raw API.
	raw := adminpb.NewBigtableTableAdminClient(e.conn)
	many := make([]*adminpb.CreateTableRequest_Split, DefaultMaxInitialSplits+1)
	for i := range many {
		many[i] = &adminpb.CreateTableRequest_Split{Key: fmt.Appendf(nil, "k%05d", i)}
	}
	_, err = raw.CreateTable(e.ctx, &adminpb.CreateTableRequest{Parent: "projects/" + testProject + "/instances/" + testInstance, TableId: "many", InitialSplits: many})
	wantCode(t, "too many splits", err, codes.InvalidArgument)
	_, err = raw.CreateTable(e.ctx, &adminpb.CreateTableRequest{Parent: "projects/p", TableId: "x"})
	wantCode(t, "bad parent", err, codes.InvalidArgument)
	_, err = raw.CreateTable(e.ctx, &adminpb.CreateTableRequest{Parent: "projects/p/instances/i", TableId: "x",
		Table: &adminpb.Table{Granularity: adminpb.Table_TimestampGranularity(7)}})
	wantCode(t, "bad granularity", err, codes.InvalidArgument)
	// Micros granularity is kept.
	tb, err := raw.CreateTable(e.ctx, &adminpb.CreateTableRequest{Parent: "projects/p/instances/i", TableId: "micro",
		Table: &adminpb.Table{Granularity: adminpb.Table_MICROS}})
	if err != nil || tb.Granularity != adminpb.Table_MICROS || tb.Name != "projects/p/instances/i/tables/micro" {
		t.Fatalf("micros table %v %v", tb, err)
	}
}

// A table whose tablets fail to open is not created.
func TestCreateTableUndoneWhenOpenFails(t *testing.T) {
	e := newEnv(t)
	e.control.setFail("OpenTable", status.Error(codes.Unavailable, "no tablet server"))
	err := e.admin.CreateTable(e.ctx, "t")
	wantCode(t, "create", err, codes.Unavailable)
	_, err = e.admin.TableInfo(e.ctx, "t")
	wantCode(t, "TableInfo after failed create", err, codes.NotFound)
	calls := e.control.Calls()
	if len(calls) != 2 || !strings.HasPrefix(calls[1], "DropTable") {
		t.Fatalf("calls %v: want OpenTable then DropTable", calls)
	}
	e.control.setFail("OpenTable", nil)
	if err := e.admin.CreateTable(e.ctx, "t"); err != nil {
		t.Fatalf("create after the failure: %v", err)
	}
}

func TestTablesAndGetTable(t *testing.T) {
	e := newEnv(t)
	for _, name := range []string{"b", "a", "c"} {
		if err := e.admin.CreateTable(e.ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	// Another instance is another namespace.
	other, err := bigtable.NewAdminClient(e.ctx, testProject, "other", optionConn(e))
	if err != nil {
		t.Fatal(err)
	}
	if err := other.CreateTable(e.ctx, "z"); err != nil {
		t.Fatal(err)
	}
	tables, err := e.admin.Tables(e.ctx)
	if err != nil || !slices.Equal(tables, []string{"a", "b", "c"}) {
		t.Fatalf("Tables %v %v", tables, err)
	}
	if tables, _ := other.Tables(e.ctx); !slices.Equal(tables, []string{"z"}) {
		t.Fatalf("other instance: %v", tables)
	}
	_, err = e.admin.TableInfo(e.ctx, "z")
	wantCode(t, "table of another instance", err, codes.NotFound)

	raw := adminpb.NewBigtableTableAdminClient(e.conn)
	parent := "projects/" + testProject + "/instances/" + testInstance
	// Paging.
	var names []string
	token := ""
	for pages := 0; ; pages++ {
		resp, err := raw.ListTables(e.ctx, &adminpb.ListTablesRequest{Parent: parent, PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, tb := range resp.Tables {
			names = append(names, tb.Name)
			if tb.ColumnFamilies != nil {
				t.Errorf("NAME_ONLY view has families: %v", tb)
			}
		}
		if token = resp.NextPageToken; token == "" {
			break
		}
		if pages > 3 {
			t.Fatal("paging does not end")
		}
	}
	if want := []string{tableFullName("a"), tableFullName("b"), tableFullName("c")}; !slices.Equal(names, want) {
		t.Fatalf("paged names %v", names)
	}
	// Views.
	full, err := raw.GetTable(e.ctx, &adminpb.GetTableRequest{Name: tableFullName("a"), View: adminpb.Table_FULL})
	if err != nil || full.ClusterStates[ClusterID].GetReplicationState() != adminpb.Table_ClusterState_READY || full.Granularity != adminpb.Table_MILLIS {
		t.Fatalf("FULL view %v %v", full, err)
	}
	nameOnly, err := raw.GetTable(e.ctx, &adminpb.GetTableRequest{Name: tableFullName("a"), View: adminpb.Table_NAME_ONLY})
	if err != nil || nameOnly.Name != tableFullName("a") || nameOnly.ColumnFamilies != nil {
		t.Fatalf("NAME_ONLY view %v %v", nameOnly, err)
	}
	_, err = raw.GetTable(e.ctx, &adminpb.GetTableRequest{Name: "tables/a"})
	wantCode(t, "malformed name", err, codes.InvalidArgument)
}

func TestDeleteTable(t *testing.T) {
	e := newEnv(t)
	if err := e.admin.CreateTableFromConf(e.ctx, &bigtable.TableConf{TableID: "a", DeletionProtection: bigtable.Protected}); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.CreateTable(e.ctx, "ab"); err != nil {
		t.Fatal(err)
	}
	// Files of both tables, as their tablets would write them.
	old := "0000000000000001-0000000000000000.sst"
	for _, name := range []string{"tables/inst/a/" + old, "tables/inst/a/" + strings.Replace(old, "1-", "2-", 1), "tables/inst/ab/" + old} {
		if err := e.store.Put(e.ctx, name, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}

	err := e.admin.DeleteTable(e.ctx, "a")
	wantCode(t, "delete protected", err, codes.FailedPrecondition)
	if !strings.Contains(err.Error(), "deletion_protection") {
		t.Errorf("error %q does not name deletion_protection", err)
	}
	if _, err := e.admin.TableInfo(e.ctx, "a"); err != nil {
		t.Fatalf("protected table gone: %v", err)
	}

	if err := e.admin.UpdateTableWithDeletionProtection(e.ctx, "a", bigtable.Unprotected); err != nil {
		t.Fatal(err)
	}
	if info, _ := e.admin.TableInfo(e.ctx, "a"); info.DeletionProtection != bigtable.Unprotected {
		t.Fatalf("protection still %v", info.DeletionProtection)
	}
	if err := e.admin.DeleteTable(e.ctx, "a"); err != nil {
		t.Fatal(err)
	}
	_, err = e.admin.TableInfo(e.ctx, "a")
	wantCode(t, "TableInfo of deleted", err, codes.NotFound)
	err = e.admin.DeleteTable(e.ctx, "a")
	wantCode(t, "second delete", err, codes.NotFound)
	if _, ok := e.control.Open(meta.TableID{Instance: testInstance, Table: "a"}); ok {
		t.Fatal("tablets of the deleted table still open")
	}
	objs, err := e.store.List(e.ctx, "tables/")
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 || objs[0].Name != "tables/inst/ab/"+old {
		t.Fatalf("files after delete: %v (want only table ab's)", objs)
	}

	// Protection back on, through the client, blocks deletion again.
	if err := e.admin.UpdateTableWithDeletionProtection(e.ctx, "ab", bigtable.Protected); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "delete re-protected", e.admin.DeleteTable(e.ctx, "ab"), codes.FailedPrecondition)
	err = e.admin.UpdateTableWithDeletionProtection(e.ctx, "nope", bigtable.Protected)
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("update of a missing table: %v", err)
	}
}

// A table whose tablets fail to close is deleted all the same.
func TestDeleteTableWhenDropFails(t *testing.T) {
	e := newEnv(t)
	if err := e.admin.CreateTable(e.ctx, "t"); err != nil {
		t.Fatal(err)
	}
	e.control.setFail("DropTable", errors.New("flush failed"))
	if err := e.admin.DeleteTable(e.ctx, "t"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "TableInfo", func() error { _, err := e.admin.TableInfo(e.ctx, "t"); return err }(), codes.NotFound)
}

func TestUpdateTableErrors(t *testing.T) {
	e := newEnv(t)
	if err := e.admin.CreateTable(e.ctx, "t"); err != nil {
		t.Fatal(err)
	}
	raw := adminpb.NewBigtableTableAdminClient(e.conn)
	tb := &adminpb.Table{Name: tableFullName("t"), DeletionProtection: true}
	_, err := raw.UpdateTable(e.ctx, &adminpb.UpdateTableRequest{Table: tb})
	wantCode(t, "no mask", err, codes.InvalidArgument)
	_, err = raw.UpdateTable(e.ctx, &adminpb.UpdateTableRequest{Table: tb, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"granularity"}}})
	wantCode(t, "immutable field", err, codes.InvalidArgument)
	_, err = raw.UpdateTable(e.ctx, &adminpb.UpdateTableRequest{Table: tb, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"change_stream_config.retention_period"}}})
	wantCode(t, "change streams", err, codes.Unimplemented)
	if info, _ := e.admin.TableInfo(e.ctx, "t"); info.DeletionProtection != bigtable.Unprotected {
		t.Fatal("a refused update changed the table")
	}
	op, err := raw.UpdateTable(e.ctx, &adminpb.UpdateTableRequest{Table: tb, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"deletion_protection"}}})
	if err != nil || !op.Done || op.GetResponse() == nil {
		t.Fatalf("operation %v %v", op, err)
	}
	var got adminpb.Table
	if err := op.GetResponse().UnmarshalTo(&got); err != nil || !got.DeletionProtection || got.Name != tableFullName("t") {
		t.Fatalf("operation's table %v %v", &got, err)
	}
	// A client that polls finds the operation.
	ops := longrunningpb.NewOperationsClient(e.conn)
	polled, err := ops.GetOperation(e.ctx, &longrunningpb.GetOperationRequest{Name: op.Name})
	if err != nil || !proto.Equal(polled, op) {
		t.Fatalf("GetOperation %v %v, want %v", polled, err, op)
	}
	_, err = ops.GetOperation(e.ctx, &longrunningpb.GetOperationRequest{Name: "operations/none"})
	wantCode(t, "unknown operation", err, codes.NotFound)
}

func TestColumnFamilies(t *testing.T) {
	e := newEnv(t)
	id := meta.TableID{Instance: testInstance, Table: "t"}
	if err := e.admin.CreateTable(e.ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.CreateColumnFamily(e.ctx, "t", "cf"); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.CreateColumnFamilyWithConfig(e.ctx, "t", "cf2", bigtable.Family{GCPolicy: bigtable.MaxVersionsPolicy(1)}); err != nil {
		t.Fatal(err)
	}
	policies := []struct {
		p    bigtable.GCPolicy
		want tabletdesc.GCPolicy
	}{
		{bigtable.MaxVersionsPolicy(2), tabletdesc.GCPolicy{MaxVersions: 2}},
		{bigtable.MaxAgePolicy(time.Hour), tabletdesc.GCPolicy{MaxAge: time.Hour}},
		{bigtable.UnionPolicy(bigtable.MaxVersionsPolicy(3), bigtable.MaxAgePolicy(2*time.Hour)),
			tabletdesc.GCPolicy{Union: []tabletdesc.GCPolicy{{MaxVersions: 3}, {MaxAge: 2 * time.Hour}}}},
		{bigtable.IntersectionPolicy(bigtable.MaxVersionsPolicy(4), bigtable.MaxAgePolicy(3*time.Hour)),
			tabletdesc.GCPolicy{Intersection: []tabletdesc.GCPolicy{{MaxVersions: 4}, {MaxAge: 3 * time.Hour}}}},
		{bigtable.NoGcPolicy(), tabletdesc.GCPolicy{}},
	}
	for _, c := range policies {
		if err := e.admin.SetGCPolicy(e.ctx, "t", "cf", c.p); err != nil {
			t.Fatalf("SetGCPolicy(%v): %v", c.p, err)
		}
		// Persisted before the tablets were told, and the tablets have it.
		entry, _ := e.catalog.Get(e.ctx, id)
		open, _ := e.control.Open(id)
		if fmt.Sprint(entry.Families["cf"].GC) != fmt.Sprint(c.want) || fmt.Sprint(open.Families["cf"].GC) != fmt.Sprint(c.want) {
			t.Fatalf("policy %v: catalog %+v, tablets %+v, want %+v", c.p, entry.Families["cf"].GC, open.Families["cf"].GC, c.want)
		}
		info, err := e.admin.TableInfo(e.ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		for _, fi := range info.FamilyInfos {
			if fi.Name == "cf" && fi.FullGCPolicy.String() != c.p.String() {
				t.Errorf("TableInfo policy %q, want %q", fi.FullGCPolicy, c.p)
			}
		}
	}

	wantCode(t, "create existing family", e.admin.CreateColumnFamily(e.ctx, "t", "cf"), codes.AlreadyExists)
	wantCode(t, "gc of missing family", e.admin.SetGCPolicy(e.ctx, "t", "nope", bigtable.MaxVersionsPolicy(1)), codes.NotFound)
	wantCode(t, "delete missing family", e.admin.DeleteColumnFamily(e.ctx, "t", "nope"), codes.NotFound)
	wantCode(t, "bad family name", e.admin.CreateColumnFamily(e.ctx, "t", "a b"), codes.InvalidArgument)
	wantCode(t, "long family name", e.admin.CreateColumnFamily(e.ctx, "t", strings.Repeat("f", 65)), codes.InvalidArgument)
	wantCode(t, "family of missing table", e.admin.CreateColumnFamily(e.ctx, "nope", "cf"), codes.NotFound)
	wantCode(t, "zero max versions", e.admin.SetGCPolicy(e.ctx, "t", "cf", bigtable.MaxVersionsPolicy(0)), codes.InvalidArgument)

	if err := e.admin.DeleteColumnFamily(e.ctx, "t", "cf2"); err != nil {
		t.Fatal(err)
	}
	info, _ := e.admin.TableInfo(e.ctx, "t")
	if !slices.Equal(info.Families, []string{"cf"}) {
		t.Fatalf("families after delete: %v", info.Families)
	}
	if open, _ := e.control.Open(id); len(open.Families) != 1 {
		t.Fatalf("tablets still have %v", open.Families)
	}

	// Deletion protection protects families too.
	if err := e.admin.UpdateTableWithDeletionProtection(e.ctx, "t", bigtable.Protected); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "drop family of protected table", e.admin.DeleteColumnFamily(e.ctx, "t", "cf"), codes.FailedPrecondition)
}

// A request's modifications apply all or none.
func TestModifyColumnFamiliesAllOrNothing(t *testing.T) {
	e := newEnv(t)
	if err := e.admin.CreateTableFromConf(e.ctx, &bigtable.TableConf{TableID: "t", Families: map[string]bigtable.GCPolicy{"a": bigtable.NoGcPolicy()}}); err != nil {
		t.Fatal(err)
	}
	raw := adminpb.NewBigtableTableAdminClient(e.conn)
	create := func(id string) *adminpb.ModifyColumnFamiliesRequest_Modification {
		return &adminpb.ModifyColumnFamiliesRequest_Modification{Id: id, Mod: &adminpb.ModifyColumnFamiliesRequest_Modification_Create{Create: &adminpb.ColumnFamily{}}}
	}
	drop := func(id string) *adminpb.ModifyColumnFamiliesRequest_Modification {
		return &adminpb.ModifyColumnFamiliesRequest_Modification{Id: id, Mod: &adminpb.ModifyColumnFamiliesRequest_Modification_Drop{Drop: true}}
	}
	before := len(e.control.Calls())
	for _, c := range []struct {
		name string
		mods []*adminpb.ModifyColumnFamiliesRequest_Modification
		code codes.Code
		msg  string
	}{
		{"then drop missing", []*adminpb.ModifyColumnFamiliesRequest_Modification{create("x"), drop("missing")}, codes.NotFound, "modifications[1].drop"},
		{"create twice", []*adminpb.ModifyColumnFamiliesRequest_Modification{create("y"), create("y")}, codes.AlreadyExists, "modifications[1].create"},
		{"no mod", []*adminpb.ModifyColumnFamiliesRequest_Modification{drop("a"), {Id: "z"}}, codes.InvalidArgument, "modifications[1]"},
		{"bad rule", []*adminpb.ModifyColumnFamiliesRequest_Modification{create("x"), {Id: "a", Mod: &adminpb.ModifyColumnFamiliesRequest_Modification_Update{
			Update: &adminpb.ColumnFamily{GcRule: &adminpb.GcRule{Rule: &adminpb.GcRule_MaxNumVersions{MaxNumVersions: -1}}}}}}, codes.InvalidArgument, "modifications[1].update.gc_rule.max_num_versions"},
	} {
		_, err := raw.ModifyColumnFamilies(e.ctx, &adminpb.ModifyColumnFamiliesRequest{Name: tableFullName("t"), Modifications: c.mods})
		wantCode(t, c.name, err, c.code)
		if !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: error %q does not name %q", c.name, err, c.msg)
		}
	}
	_, err := raw.ModifyColumnFamilies(e.ctx, &adminpb.ModifyColumnFamiliesRequest{Name: tableFullName("t")})
	wantCode(t, "no modifications", err, codes.InvalidArgument)
	info, _ := e.admin.TableInfo(e.ctx, "t")
	if !slices.Equal(info.Families, []string{"a"}) {
		t.Fatalf("refused modifications changed the families: %v", info.Families)
	}
	if after := len(e.control.Calls()); after != before {
		t.Fatalf("refused modifications reached the tablets: %v", e.control.Calls()[before:])
	}
	// Drop and re-create in one request is fine.
	tb, err := raw.ModifyColumnFamilies(e.ctx, &adminpb.ModifyColumnFamiliesRequest{Name: tableFullName("t"),
		Modifications: []*adminpb.ModifyColumnFamiliesRequest_Modification{drop("a"), create("a"), create("b")}})
	if err != nil || len(tb.ColumnFamilies) != 2 {
		t.Fatalf("drop+create: %v %v", tb, err)
	}
}

// Concurrent schema changes of one table are serialised: none is lost.
func TestConcurrentFamilyCreation(t *testing.T) {
	e := newEnv(t)
	if err := e.admin.CreateTable(e.ctx, "t"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- e.admin.CreateColumnFamily(e.ctx, "t", fmt.Sprintf("f%02d", i))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	info, _ := e.admin.TableInfo(e.ctx, "t")
	open, _ := e.control.Open(meta.TableID{Instance: testInstance, Table: "t"})
	if len(info.Families) != 16 || len(open.Families) != 16 {
		t.Fatalf("families: catalog %d, tablets %d; want 16", len(info.Families), len(open.Families))
	}
}

func TestDropRowRange(t *testing.T) {
	e := newEnv(t)
	if err := e.admin.CreateTable(e.ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.DropRowRange(e.ctx, "t", "com.cnn"); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.DropAllRows(e.ctx, "t"); err != nil {
		t.Fatal(err)
	}
	calls := e.control.Calls()
	want := []string{`DropRowRange inst/t "com.cnn"`, `DropRowRange inst/t ""`}
	if !slices.Equal(calls[len(calls)-2:], want) {
		t.Fatalf("calls %v, want %v at the end", calls, want)
	}
	err := e.admin.DropRowRange(e.ctx, "t", "")
	wantCode(t, "empty prefix", err, codes.InvalidArgument)
	wantCode(t, "missing table", e.admin.DropAllRows(e.ctx, "nope"), codes.NotFound)
	raw := adminpb.NewBigtableTableAdminClient(e.conn)
	_, err = raw.DropRowRange(e.ctx, &adminpb.DropRowRangeRequest{Name: tableFullName("t")})
	wantCode(t, "no target", err, codes.InvalidArgument)
	_, err = raw.DropRowRange(e.ctx, &adminpb.DropRowRangeRequest{Name: tableFullName("t"),
		Target: &adminpb.DropRowRangeRequest_RowKeyPrefix{RowKeyPrefix: make([]byte, 64<<10+1)}})
	wantCode(t, "long prefix", err, codes.InvalidArgument)
	e.control.setFail("DropRowRange", errors.New("disk on fire"))
	wantCode(t, "control failure", e.admin.DropAllRows(e.ctx, "t"), codes.Internal)
}

func TestWaitForReplication(t *testing.T) {
	e := newEnv(t)
	if err := e.admin.CreateTable(e.ctx, "t"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	if err := e.admin.WaitForReplication(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "missing table", e.admin.WaitForReplication(ctx, "nope"), codes.NotFound)
}

// Start after a restart reopens every table of the catalog with its schema
// and collects the files of tables deleted half-way.
func TestStartReopensTables(t *testing.T) {
	store := blob.NewMemory()
	e := newEnvOn(t, store, newFakeTableHost(), Options{})
	if err := e.admin.CreateTableFromConf(e.ctx, &bigtable.TableConf{TableID: "a", SplitKeys: []string{"k"},
		Families: map[string]bigtable.GCPolicy{"f": bigtable.MaxVersionsPolicy(2)}}); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.CreateTable(e.ctx, "b"); err != nil {
		t.Fatal(err)
	}
	sst := "0000000000000001-0000000000000000.sst"
	for _, name := range []string{"tables/inst/a/" + sst, "tables/inst/gone/" + sst} {
		if err := store.Put(e.ctx, name, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}

	control := newFakeTableHost()
	e2 := newEnvOn(t, store, control, Options{})
	if calls := control.Calls(); !slices.Equal(calls, []string{"OpenTable inst/a", "OpenTable inst/b"}) {
		t.Fatalf("restart calls %v", calls)
	}
	a, _ := control.Open(meta.TableID{Instance: testInstance, Table: "a"})
	if len(a.Tablets) != 2 || a.Families["f"].GC.MaxVersions != 2 {
		t.Fatalf("reopened %+v", a)
	}
	objs, _ := store.List(e2.ctx, "tables/")
	if len(objs) != 1 || objs[0].Name != "tables/inst/a/"+sst {
		t.Fatalf("files after restart %v: want only table a's", objs)
	}

	// A table that fails to open makes Start fail, naming it.
	bad := newFakeTableHost()
	bad.setFail("OpenTable", errors.New("corrupt state"))
	svc, _ := NewAdminService(Options{Catalog: NewBlobCatalog(store, "catalog"), Host: bad, Logger: quietLogger()})
	if err := svc.Start(e.ctx); err == nil || !strings.Contains(err.Error(), "inst/a") {
		t.Fatalf("Start with failing tablets: %v", err)
	}
}

// With Options.Instance every instance is the same namespace, and names
// in responses keep the request's instance.
func TestInstanceAgnostic(t *testing.T) {
	e := newEnvOn(t, blob.NewMemory(), newFakeTableHost(), Options{Instance: "all"})
	if err := e.admin.CreateTable(e.ctx, "t"); err != nil {
		t.Fatal(err)
	}
	other, err := bigtable.NewAdminClient(e.ctx, "p2", "i2", optionConn(e))
	if err != nil {
		t.Fatal(err)
	}
	if tables, err := other.Tables(e.ctx); err != nil || !slices.Equal(tables, []string{"t"}) {
		t.Fatalf("other instance sees %v %v", tables, err)
	}
	if _, err := e.catalog.Get(e.ctx, meta.TableID{Instance: "all", Table: "t"}); err != nil {
		t.Fatalf("catalog: %v", err)
	}
	raw := adminpb.NewBigtableTableAdminClient(e.conn)
	tb, err := raw.GetTable(e.ctx, &adminpb.GetTableRequest{Name: "projects/p2/instances/i2/tables/t"})
	if err != nil || tb.Name != "projects/p2/instances/i2/tables/t" {
		t.Fatalf("GetTable %v %v", tb, err)
	}
}

// Concurrent creations of one table: one wins, the others are
// ALREADY_EXISTS, and the tablets are opened once.
func TestConcurrentCreateTable(t *testing.T) {
	e := newEnv(t)
	const n = 8
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- e.admin.CreateTable(e.ctx, "t")
		}()
	}
	wg.Wait()
	close(errs)
	ok := 0
	for err := range errs {
		if err == nil {
			ok++
		} else {
			wantCode(t, "losing create", err, codes.AlreadyExists)
		}
	}
	if ok != 1 {
		t.Fatalf("%d creations succeeded, want 1", ok)
	}
	if calls := e.control.Calls(); !slices.Equal(calls, []string{"OpenTable inst/t"}) {
		t.Fatalf("calls %v", calls)
	}
}
