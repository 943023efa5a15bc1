package jobs

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"

	"github.com/tabuladb/tabula/internal/devtest"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/cluster"
)

// testSplitBytes makes tablets of the shared dev server split once they
// hold this much: small, so that the split test can grow tablets past it
// with a few MB; the other tests' tables stay below it.
const testSplitBytes = 1 << 20

// env is the one in-process tabula dev of the test binary, with the
// official Cloud Bigtable clients on it.
var env struct {
	addr  string
	data  *bigtable.Client
	admin *bigtable.AdminClient
}

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	s, err := devtest.Start(context.Background(), cluster.DevConfig{SplitBytes: testSplitBytes, MemtableBytes: 256 << 10})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	env.addr, env.data, env.admin = s.Addr, s.Data, s.Admin
	devServer = s
	return ptest.MainRetWithDefault(m, "prism")
}

// devServer is the shared server, for devtest's helpers.
var devServer *devtest.Server

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// createTable creates table with families and split keys through the
// official admin client.
func createTable(t testing.TB, table string, families []string, splits ...string) {
	t.Helper()
	if err := devServer.CreateTable(testCtx(t), table, families, splits...); err != nil {
		t.Fatal(err)
	}
}

// writeRows writes rms through the official client.
func writeRows(t testing.TB, table string, rms []cell.RowMutation) {
	t.Helper()
	if err := devServer.WriteRows(testCtx(t), table, rms); err != nil {
		t.Fatal(err)
	}
}

// officialScan reads rows through the official client: the reference.
func officialScan(t testing.TB, table string, rs bigtable.RowSet, opts ...bigtable.ReadOption) []cell.Row {
	t.Helper()
	rows, err := devServer.ReadRows(testCtx(t), table, rs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

var (
	testRows        = devtest.Rows
	fromOfficial    = devtest.FromOfficial
	digest          = devtest.Digest
	digests         = devtest.Digests
	officialOptions = devtest.ClientOptions
)
