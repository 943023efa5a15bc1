package jobs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

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
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "jobs-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	d, err := cluster.StartDev(ctx, cluster.DevConfig{Dir: dir, Addr: "127.0.0.1:0", SplitBytes: testSplitBytes, MemtableBytes: 256 << 10,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start tabula dev:", err)
		return 1
	}
	defer d.Close()
	env.addr = d.Addr()
	conn, err := grpc.NewClient(env.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20)))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer conn.Close()
	if env.data, err = bigtable.NewClientWithConfig(ctx, "tabula", "dev",
		bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(conn)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if env.admin, err = bigtable.NewAdminClient(ctx, "tabula", "dev", option.WithGRPCConn(conn)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return ptest.MainRetWithDefault(m, "prism")
}

// officialOptions are the official client's options for a tabula dev
// at addr.
func officialOptions(addr string) []option.ClientOption {
	return []option.ClientOption{option.WithEndpoint(addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials()))}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// createTable creates table with families and split keys through the
// official admin client.
func createTable(t testing.TB, table string, families []string, splits ...string) {
	t.Helper()
	fams := map[string]bigtable.Family{}
	for _, f := range families {
		fams[f] = bigtable.Family{GCPolicy: bigtable.NoGcPolicy()}
	}
	if err := env.admin.CreateTableFromConf(testCtx(t), &bigtable.TableConf{TableID: table, ColumnFamilies: fams, SplitKeys: splits}); err != nil {
		t.Fatalf("create %s: %v", table, err)
	}
}

// writeRows writes rms through the official client.
func writeRows(t testing.TB, table string, rms []cell.RowMutation) {
	t.Helper()
	tbl := env.data.Open(table)
	for start := 0; start < len(rms); start += 500 {
		end := min(start+500, len(rms))
		keys := make([]string, 0, end-start)
		muts := make([]*bigtable.Mutation, 0, end-start)
		for _, rm := range rms[start:end] {
			m := bigtable.NewMutation()
			for _, mu := range rm.Mutations {
				m.Set(mu.Family, string(mu.Qualifier), bigtable.Timestamp(mu.Timestamp), mu.Value)
			}
			keys = append(keys, string(rm.Row))
			muts = append(muts, m)
		}
		errs, err := tbl.ApplyBulk(testCtx(t), keys, muts)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range errs {
			if e != nil {
				t.Fatalf("write %q: %v", keys[i], e)
			}
		}
	}
}

// testRows returns n rows "r%05d" with two versions of f:a, one of f:b
// and (every third row) one of g:c; timestamps are whole milliseconds
// (tables keep millisecond granularity, as Cloud Bigtable's do).
func testRows(n int) []cell.RowMutation {
	out := make([]cell.RowMutation, n)
	for i := range out {
		key := []byte(fmt.Sprintf("r%05d", i))
		ms := []cell.Mutation{
			cell.Set("f", []byte("a"), 1_000_000, []byte(fmt.Sprintf("a-old-%d", i))),
			cell.Set("f", []byte("a"), 2_000_000+1000*int64(i), []byte(fmt.Sprintf("a-new-%d", i))),
			cell.Set("f", []byte("b"), 1_500_000, []byte(fmt.Sprintf("b-%d-%x", i, i*7919))),
		}
		if i%3 == 0 {
			ms = append(ms, cell.Set("g", []byte("c"), 3_000_000, []byte{byte(i), 0, 0xff}))
		}
		out[i] = cell.RowMutation{Row: key, Mutations: ms}
	}
	return out
}

// officialScan reads rows through the official client: the reference.
func officialScan(t testing.TB, table string, rs bigtable.RowSet, opts ...bigtable.ReadOption) []cell.Row {
	t.Helper()
	var out []cell.Row
	err := env.data.Open(table).ReadRows(testCtx(t), rs, func(r bigtable.Row) bool {
		out = append(out, fromOfficial(r))
		return true
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func fromOfficial(r bigtable.Row) cell.Row {
	cr := cell.Row{Key: []byte(r.Key())}
	for fam, items := range r {
		for _, it := range items {
			q := it.Column[len(fam)+1:]
			cr.Cells = append(cr.Cells, cell.Cell{Family: fam, Qualifier: []byte(q), Timestamp: int64(it.Timestamp), Value: it.Value})
		}
	}
	sort.SliceStable(cr.Cells, func(i, j int) bool { return cell.CompareCells(cr.Cells[i], cr.Cells[j]) < 0 })
	return cr
}

// digest is a row's identity for comparisons: its key and a hash of
// every cell (family, qualifier, timestamp, value), in order.
func digest(r cell.Row) string {
	h := sha256.New()
	for _, c := range r.Cells {
		fmt.Fprintf(h, "%q %q %d %q;", c.Family, c.Qualifier, c.Timestamp, c.Value)
	}
	return fmt.Sprintf("%s/%d/%s", r.Key, len(r.Cells), hex.EncodeToString(h.Sum(nil))[:16])
}

func digests(rows []cell.Row) []any {
	out := make([]any, len(rows))
	for i, r := range rows {
		out[i] = digest(r)
	}
	return out
}
