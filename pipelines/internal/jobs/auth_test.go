package jobs

import (
	"flag"
	"strings"
	"testing"

	"github.com/tabuladb/tabula/beamio"
	"github.com/tabuladb/tabula/internal/devtest"
	"github.com/tabuladb/tabula/pipelines/internal/pipe"
	"github.com/tabuladb/tabula/security/acl"
	"github.com/tabuladb/tabula/security/auth"
	"github.com/tabuladb/tabula/storage/cluster"
)

// TestCopyWithCredentialFlags: the copy pipeline against tabula dev with
// authentication on, its connection from the pipelines' flags: without
// --token it is refused (UNAUTHENTICATED) and writes nothing; with
// etl's --token (read on the source, read and write on the destination;
// the destination takes the source's credentials) it copies exactly.
func TestCopyWithCredentialFlags(t *testing.T) {
	srv, tokens := devtest.StartTWithAuth(t, cluster.DevConfig{}, "etl")
	t.Setenv(auth.TokenEnv, "")
	srv.CreateTable(t, "from", []string{"f", "g"}, "r00020")
	srv.WriteRows(t, "from", devtest.Rows(60))
	srv.CreateTable(t, "to", []string{"f", "g"})
	srv.Grant(t, "from", "user:etl", acl.RoleReader)
	srv.Grant(t, "to", "user:etl", acl.RoleUser)
	copyWith := func(args ...string) error {
		var conn pipe.Conn
		fs := flag.NewFlagSet("copy", flag.ContinueOnError)
		conn.Register(fs, "", "")
		if err := fs.Parse(append([]string{"--addr", srv.Addr}, args...)); err != nil {
			t.Fatal(err)
		}
		_, err := Copy(devtest.Context(t), CopyConfig{Read: beamio.ReadConfig{Table: conn.Table("from")}, DstTable: "to"})
		return err
	}
	if err := copyWith(); err == nil || !strings.Contains(err.Error(), "Unauthenticated") {
		t.Fatalf("copy without credentials: %v, want UNAUTHENTICATED", err)
	}
	if got := srv.CellDump(t, "to"); len(got) != 0 {
		t.Fatalf("a refused copy wrote %d cells", len(got))
	}
	if err := copyWith("--token", tokens["etl"]); err != nil {
		t.Fatalf("copy as etl: %v", err)
	}
	if want, got := srv.CellDump(t, "from"), srv.CellDump(t, "to"); strings.Join(got, "\n") != strings.Join(want, "\n") || len(want) == 0 {
		t.Fatalf("to has %d cells, from %d: not a copy", len(got), len(want))
	}
}
