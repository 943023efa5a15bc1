package beamio

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/passert"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
	"google.golang.org/grpc/codes"

	"github.com/tabuladb/tabula/internal/devtest"
	"github.com/tabuladb/tabula/security/acl"
	"github.com/tabuladb/tabula/security/auth"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/cluster"
)

// asMutation turns a read row into the mutation rewriting it elsewhere.
func asMutation(r Row) RowMutation {
	m := RowMutation{Row: r.Key}
	for _, c := range r.Cells {
		m.Mutations = append(m.Mutations, cell.Set(c.Family, c.Qualifier, c.Timestamp, c.Value))
	}
	return m
}

func deadCode(f FailedMutation) uint32 { return f.Code }

func init() {
	register.Function1x1(asMutation)
	register.Function1x1(deadCode)
}

// TestPipelineCredentials: a pipeline on prism against tabula dev with
// authentication on runs as the principal of its credentials. With etl's
// token (read on src, read and write on dst; the write's from a token
// file) it copies src to dst exactly; without credentials its read is
// refused (UNAUTHENTICATED) and the pipeline fails; as a reader of src
// only, every write is refused (PERMISSION_DENIED dead letters) and dst
// is unchanged.
func TestPipelineCredentials(t *testing.T) {
	srv, tokens := devtest.StartTWithAuth(t, cluster.DevConfig{}, "etl", "reader")
	etlFile := filepath.Join(t.TempDir(), "etl-token")
	if err := os.WriteFile(etlFile, []byte(tokens["etl"]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(auth.TokenEnv, "") // the pipeline's credentials are only its own
	srv.CreateTable(t, "src", []string{"f", "g"}, "r00100")
	srv.WriteRows(t, "src", devtest.Rows(300))
	srv.CreateTable(t, "dst", []string{"f", "g"})
	srv.Grant(t, "src", "user:etl", acl.RoleReader)
	srv.Grant(t, "src", "user:reader", acl.RoleReader)
	srv.Grant(t, "dst", "user:etl", acl.RoleUser)
	table := func(name string, c Credentials) Table {
		return Table{Addr: srv.Addr, Project: devtest.Project, Instance: devtest.Instance, Table: name, Auth: c}
	}
	// copyAs builds src → dst with the read's and the write's credentials
	// and returns the dead letters' codes.
	copyAs := func(read, write Credentials) (*beam.Pipeline, beam.Scope, beam.PCollection) {
		p, s := beam.NewPipelineWithRoot()
		rows := Read(s, ReadConfig{Table: table("src", read)})
		_, dead := Write(s, WriteConfig{Table: table("dst", write)}, beam.ParDo(s, asMutation, rows))
		return p, s, beam.ParDo(s, deadCode, dead)
	}

	// No credentials: the read is refused, the pipeline fails.
	p, _, _ := copyAs(Credentials{}, Credentials{})
	if err := ptest.Run(p); err == nil || !strings.Contains(err.Error(), "Unauthenticated") {
		t.Fatalf("pipeline without credentials: %v, want it refused (UNAUTHENTICATED)", err)
	}
	// A reader of src only: every write refused.
	p, s, dead := copyAs(Credentials{Token: tokens["reader"]}, Credentials{Token: tokens["reader"]})
	denied := make([]any, 300) // one dead letter per row
	for i := range denied {
		denied[i] = uint32(codes.PermissionDenied)
	}
	passert.Equals(s, dead, denied...)
	if err := ptest.Run(p); err != nil {
		t.Fatalf("pipeline as a reader: %v", err)
	}
	if got := srv.CellDump(t, "dst"); len(got) != 0 {
		t.Fatalf("refused writes left %d cells in dst", len(got))
	}
	// etl: the exact copy.
	p, s, dead = copyAs(Credentials{Token: tokens["etl"]}, Credentials{TokenFile: etlFile})
	passert.Empty(s, dead)
	if err := ptest.Run(p); err != nil {
		t.Fatalf("pipeline as etl: %v", err)
	}
	want, got := srv.CellDump(t, "src"), srv.CellDump(t, "dst")
	if strings.Join(got, "\n") != strings.Join(want, "\n") || len(want) < 900 {
		t.Fatalf("dst has %d cells, src %d: not a copy", len(got), len(want))
	}
}
