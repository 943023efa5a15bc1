package master

import (
	"slices"
	"strings"
	"testing"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/storage/master/adminextpb"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/sstable"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

func TestLocalityGroups(t *testing.T) {
	e := newEnv(t)
	id := meta.TableID{Instance: testInstance, Table: "web"}
	if err := e.admin.CreateTableFromConf(e.ctx, &bigtable.TableConf{TableID: "web",
		Families: map[string]bigtable.GCPolicy{"contents": bigtable.MaxVersionsPolicy(3)}}); err != nil {
		t.Fatal(err)
	}
	// A new table has the default group with the table's families.
	resp, err := e.ext.GetLocalityGroups(e.ctx, &adminextpb.GetLocalityGroupsRequest{Table: tableFullName("web")})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Groups) != 1 || resp.Groups[0].Name != "default" || !slices.Equal(resp.Groups[0].Families, []string{"contents"}) ||
		resp.Groups[0].BlockSize != sstable.DefaultBlockSize || resp.Groups[0].Compression != adminextpb.Compression_COMPRESSION_NONE {
		t.Fatalf("new table's groups %v", resp)
	}

	// Missing families are created in the group; options are set.
	resp, err = e.ext.SetLocalityGroup(e.ctx, &adminextpb.SetLocalityGroupRequest{Table: tableFullName("web"), Group: "meta",
		Families: []string{"anchor", "language"}, InMemory: proto.Bool(true), Compression: adminextpb.Compression_COMPRESSION_SNAPPY, BlockSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Groups) != 2 || resp.Groups[1].Name != "meta" || !slices.Equal(resp.Groups[1].Families, []string{"anchor", "language"}) ||
		!resp.Groups[1].InMemory || resp.Groups[1].Compression != adminextpb.Compression_COMPRESSION_SNAPPY || resp.Groups[1].BlockSize != 4096 {
		t.Fatalf("after SetLocalityGroup: %v", resp)
	}
	open, _ := e.control.Open(id)
	if open.Families["anchor"].LocalityGroup != "meta" || !open.LocalityGroups["meta"].InMemory ||
		open.LocalityGroups["meta"].Compression != tabletdesc.SnappyCompression || open.LocalityGroups["meta"].BlockSize != 4096 {
		t.Fatalf("tablets got %+v", open)
	}
	if err := open.Schema().Validate(); err != nil {
		t.Fatalf("schema given to the tablets: %v", err)
	}
	// The families are ordinary families for the Cloud API.
	info, _ := e.admin.TableInfo(e.ctx, "web")
	slices.Sort(info.Families)
	if !slices.Equal(info.Families, []string{"anchor", "contents", "language"}) {
		t.Fatalf("families %v", info.Families)
	}
	// A GC policy update keeps the family in its group.
	if err := e.admin.SetGCPolicy(e.ctx, "web", "anchor", bigtable.MaxVersionsPolicy(1)); err != nil {
		t.Fatal(err)
	}
	if entry, _ := e.catalog.Get(e.ctx, id); entry.Families["anchor"].LocalityGroup != "meta" {
		t.Fatalf("SetGCPolicy moved the family: %+v", entry.Families["anchor"])
	}

	// Reconfiguring keeps what it leaves unset: in_memory, compression and
	// block size.
	resp, err = e.ext.SetLocalityGroup(e.ctx, &adminextpb.SetLocalityGroupRequest{Table: tableFullName("web"), Group: "meta", Families: []string{"anchor"}})
	if err != nil {
		t.Fatal(err)
	}
	if g := resp.Groups[1]; !g.InMemory || g.Compression != adminextpb.Compression_COMPRESSION_SNAPPY || g.BlockSize != 4096 {
		t.Fatalf("group reconfigured with nothing set: %v", g)
	}
	// An explicit false takes the group out of memory, keeping the rest.
	resp, err = e.ext.SetLocalityGroup(e.ctx, &adminextpb.SetLocalityGroupRequest{Table: tableFullName("web"), Group: "meta", InMemory: proto.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	if g := resp.Groups[1]; g.InMemory || g.Compression != adminextpb.Compression_COMPRESSION_SNAPPY || g.BlockSize != 4096 {
		t.Fatalf("group reconfigured with in_memory=false: %v", g)
	}
	// The default group's options can be set too.
	if _, err := e.ext.SetLocalityGroup(e.ctx, &adminextpb.SetLocalityGroupRequest{Table: tableFullName("web"), Group: "default",
		Families: []string{"contents"}, Compression: adminextpb.Compression_COMPRESSION_ZSTD}); err != nil {
		t.Fatal(err)
	}
	if entry, _ := e.catalog.Get(e.ctx, id); entry.LocalityGroups["default"].Compression != tabletdesc.ZstdCompression || entry.Families["contents"].LocalityGroup != "" {
		t.Fatalf("default group: %+v", entry)
	}

	// Moving an existing family is refused, clearly, and changes nothing.
	before, _ := e.catalog.Get(e.ctx, id)
	_, err = e.ext.SetLocalityGroup(e.ctx, &adminextpb.SetLocalityGroupRequest{Table: tableFullName("web"), Group: "meta", Families: []string{"new", "contents"}})
	wantCode(t, "move", err, codes.FailedPrecondition)
	if !strings.Contains(err.Error(), `"contents"`) || !strings.Contains(err.Error(), `locality group "default"`) {
		t.Errorf("move error %q does not say which family and group", err)
	}
	if after, _ := e.catalog.Get(e.ctx, id); after.Generation != before.Generation {
		t.Fatal("a refused move changed the table")
	}
	// A dropped family may be re-created in another group.
	if err := e.admin.DeleteColumnFamily(e.ctx, "web", "contents"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ext.SetLocalityGroup(e.ctx, &adminextpb.SetLocalityGroupRequest{Table: tableFullName("web"), Group: "meta", Families: []string{"contents"}, InMemory: proto.Bool(true)}); err != nil {
		t.Fatalf("re-create in another group: %v", err)
	}

	for _, c := range []struct {
		name string
		req  *adminextpb.SetLocalityGroupRequest
		code codes.Code
		msg  string
	}{
		{"bad group", &adminextpb.SetLocalityGroupRequest{Table: tableFullName("web"), Group: "a/b"}, codes.InvalidArgument, "group"},
		{"bad family", &adminextpb.SetLocalityGroupRequest{Table: tableFullName("web"), Group: "g", Families: []string{"ok", ""}}, codes.InvalidArgument, "families[1]"},
		{"small block", &adminextpb.SetLocalityGroupRequest{Table: tableFullName("web"), Group: "g", BlockSize: 10}, codes.InvalidArgument, "block_size"},
		{"huge block", &adminextpb.SetLocalityGroupRequest{Table: tableFullName("web"), Group: "g", BlockSize: 1 << 40}, codes.InvalidArgument, "block_size"},
		{"bad compression", &adminextpb.SetLocalityGroupRequest{Table: tableFullName("web"), Group: "g", Compression: 9}, codes.InvalidArgument, "compression"},
		{"missing table", &adminextpb.SetLocalityGroupRequest{Table: tableFullName("nope"), Group: "g"}, codes.NotFound, "nope"},
		{"bad table name", &adminextpb.SetLocalityGroupRequest{Table: "web", Group: "g"}, codes.InvalidArgument, "table"},
	} {
		_, err := e.ext.SetLocalityGroup(e.ctx, c.req)
		wantCode(t, c.name, err, c.code)
		if !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: error %q does not name %q", c.name, err, c.msg)
		}
	}
	_, err = e.ext.GetLocalityGroups(e.ctx, &adminextpb.GetLocalityGroupsRequest{Table: tableFullName("nope")})
	wantCode(t, "get of missing table", err, codes.NotFound)
}

// The groups the extension writes are ones the engine accepts.
func TestLocalityGroupSchemaIsValid(t *testing.T) {
	s := tabletdesc.Schema{Families: map[string]tabletdesc.Family{"a": {Name: "a", LocalityGroup: storedGroup("default")}, "b": {Name: "b", LocalityGroup: storedGroup("g")}}}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if s.Families["a"].LocalityGroup != "" || groupOf(s.Families["b"]) != "g" || groupOf(s.Families["a"]) != tabletdesc.DefaultLocalityGroup {
		t.Fatalf("groups %+v", s.Families)
	}
}
