package cluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	dto "github.com/prometheus/client_model/go"
	"github.com/tabuladb/tabula/storage/meta"
)

// TestDevSweepsCompactedFiles: `tabula dev` deletes, with the one sweep
// policy, the SSTables that merging compactions left unreferenced, and
// nothing any tablet still reads.
func TestDevSweepsCompactedFiles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := StartDev(ctx, DevConfig{
		Dir: t.TempDir(), Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		MemtableBytes: 16 << 10, SweepInterval: 20 * time.Millisecond, SweepGrace: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	conn, err := grpc.NewClient(d.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	admin, err := bigtable.NewAdminClient(ctx, "p", "i", option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	data, err := bigtable.NewClientWithConfig(ctx, "p", "i", bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: "t", Families: map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()}}); err != nil {
		t.Fatal(err)
	}
	tbl := data.Open("t")
	// Write until a merging compaction has left files for the sweep:
	// how many flushes that takes depends on how fast they run.
	rows := 0
	value := []byte(strings.Repeat("v", 100))
	for sweptFiles(t, d) == 0 {
		if rows >= 100_000 {
			t.Fatalf("%d rows written and nothing swept", rows)
		}
		var keys []string
		var muts []*bigtable.Mutation
		for i := rows; i < rows+100; i++ {
			m := bigtable.NewMutation()
			m.Set("f", "q", bigtable.Timestamp(1000), value)
			keys = append(keys, fmt.Sprintf("row%06d", i))
			muts = append(muts, m)
		}
		errs, err := tbl.ApplyBulk(ctx, keys, muts)
		if err != nil || errs != nil {
			t.Fatalf("ApplyBulk: %v %v", err, errs)
		}
		rows += 100
	}

	// Then every file left in the store is one a tablet references.
	for {
		unreferenced := unreferencedFiles(t, ctx, d)
		if len(unreferenced) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("unreferenced files left: %v", unreferenced)
		case <-time.After(50 * time.Millisecond):
		}
	}
	n := 0
	if err := tbl.ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		n++
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if n != rows {
		t.Fatalf("read %d rows after the sweep, want %d", n, rows)
	}
}

// unreferencedFiles lists the SSTables of the store that no state of a
// tablet the host serves references.
func unreferencedFiles(t *testing.T, ctx context.Context, d *Dev) []string {
	t.Helper()
	referenced := make(map[string]bool)
	for _, table := range d.host.Tables() {
		for _, ti := range d.host.TableTablets(table) {
			st, err := d.states.Load(ctx, ti.ID)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range st.Files() {
				referenced[f] = true
			}
		}
	}
	list, err := d.store.List(ctx, meta.TableDirPrefix)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range list {
		if strings.HasSuffix(a.Name, ".sst") && !referenced[a.Name] {
			out = append(out, a.Name)
		}
	}
	return out
}

// sweptFiles reads the dev server's sweep counter.
func sweptFiles(t *testing.T, d *Dev) float64 {
	t.Helper()
	var m dto.Metric
	if err := d.swept.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestDevRestartLogsNoWarning: a restarted tabula dev finds METADATA at
// the previous run's address, where nothing listens any more — the
// recovery of a dead server, dev's every restart — and says so at INFO,
// not as the warnings a second `tabula demo` used to print.
func TestDevRestartLogsNoWarning(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	d, err := StartDev(ctx, DevConfig{Dir: dir, Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	first := d.Addr()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	// Another port than the first run's (port 0 may, rarely, give the
	// same one again: then nothing would be at a dead address).
	second, err := freeAddr(first)
	if err != nil {
		t.Fatal(err)
	}
	var logged syncBuffer
	d, err = StartDev(ctx, DevConfig{Dir: dir, Addr: second, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	out := logged.String()
	if strings.Contains(out, "level=WARN") {
		t.Fatalf("a restart logged warnings:\n%s", out)
	}
	if !strings.Contains(out, "METADATA tablet at a dead server") {
		t.Fatalf("the restart did not meet the previous run's METADATA (the test checked nothing):\n%s", out)
	}
}

// freeAddr returns a loopback address with a free port other than not's.
func freeAddr(not string) (string, error) {
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		addr := l.Addr().String()
		l.Close()
		if addr != not {
			return addr, nil
		}
	}
}
