package jobs_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tabuladb/tabula/storage/cluster"
)

// env is a tabula dev in this process, with the official Cloud Bigtable
// clients connected to it: the reference the jobs are checked against.
type env struct {
	addr  string
	admin *bigtable.AdminClient
	data  *bigtable.Client
	ctx   context.Context
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func startEnv(t testing.TB) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	d, err := cluster.StartDev(ctx, cluster.DevConfig{Dir: t.TempDir(), Addr: "127.0.0.1:0", Logger: quietLogger(),
		BlockCacheBytes: -1, ScanCacheBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	opts := []option.ClientOption{option.WithEndpoint(d.Addr()), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials()))}
	admin, err := bigtable.NewAdminClient(ctx, "tabula", "dev", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	data, err := bigtable.NewClient(ctx, "tabula", "dev", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { data.Close() })
	return &env{addr: d.Addr(), admin: admin, data: data, ctx: ctx}
}

// createTable creates table with families and split keys.
func (e *env) createTable(t testing.TB, table string, families []string, splits ...string) {
	t.Helper()
	fams := map[string]bigtable.GCPolicy{}
	for _, f := range families {
		fams[f] = bigtable.NoGcPolicy()
	}
	if err := e.admin.CreateTableFromConf(e.ctx, &bigtable.TableConf{TableID: table, Families: fams, SplitKeys: splits}); err != nil {
		t.Fatal(err)
	}
}

// cellDump is every cell of a table with its timestamp, in order: what
// "byte-identical" compares.
func (e *env) cellDump(t testing.TB, table string) []string {
	t.Helper()
	var out []string
	err := e.data.Open(table).ReadRows(e.ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		var fams []string
		for f := range r {
			fams = append(fams, f)
		}
		sort.Strings(fams)
		for _, f := range fams {
			for _, it := range r[f] {
				out = append(out, fmt.Sprintf("%s|%s|%d|%x", it.Row, it.Column, it.Timestamp, it.Value))
			}
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// splitKeys returns n-1 keys splitting "row%05d" keys evenly.
func splitKeys(rows, n int) []string {
	var s []string
	for i := 1; i < n; i++ {
		s = append(s, fmt.Sprintf("row%05d", i*rows/n))
	}
	return s
}
