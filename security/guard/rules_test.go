package guard

import (
	"fmt"
	"slices"
	"testing"

	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"cloud.google.com/go/iam/apiv1/iampb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Every method of the Cloud Bigtable data and table admin services has a
// rule of its own: a new RPC in a client library update must be decided,
// not fall to the default by accident.
func TestEveryMethodHasARule(t *testing.T) {
	known := KnownMethods()
	n := 0
	for _, sd := range []protoreflect.ServiceDescriptor{
		bigtablepb.File_google_bigtable_v2_bigtable_proto.Services().ByName("Bigtable"),
		adminpb.File_google_bigtable_admin_v2_bigtable_table_admin_proto.Services().ByName("BigtableTableAdmin"),
	} {
		m := sd.Methods()
		for i := range m.Len() {
			n++
			full := fmt.Sprintf("/%s/%s", sd.FullName(), m.Get(i).Name())
			if !slices.Contains(known, full) {
				t.Errorf("%s has no rule", full)
			}
		}
	}
	if n < 50 {
		t.Fatalf("only %d methods in the descriptors", n)
	}
}

func TestTableOf(t *testing.T) {
	const tb = "projects/p/instances/i/tables/t"
	cases := []struct {
		req  proto.Message
		want string
	}{
		{&bigtablepb.ReadRowsRequest{TableName: tb}, tb},
		{&bigtablepb.ReadRowsRequest{AuthorizedViewName: tb + "/authorizedViews/v"}, tb},
		{&adminpb.UpdateTableRequest{Table: &adminpb.Table{Name: tb}}, tb},
		{&adminpb.UpdateAuthorizedViewRequest{AuthorizedView: &adminpb.AuthorizedView{Name: tb + "/authorizedViews/v"}}, tb},
		{&iampb.GetIamPolicyRequest{Resource: tb}, tb},
		{&adminpb.CreateAuthorizedViewRequest{Parent: tb}, tb},
		{&adminpb.ListTablesRequest{Parent: "projects/p/instances/i"}, ""},
		{&bigtablepb.ReadRowsRequest{TableName: "projects/p/instances/i/tables/"}, ""},
		{&bigtablepb.ReadRowsRequest{TableName: "tables/t"}, ""},
	}
	for i, c := range cases {
		if got := tableOf(c.req); got != c.want {
			t.Errorf("%d: tableOf = %q, want %q", i, got, c.want)
		}
	}
}
