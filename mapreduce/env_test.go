package mapreduce_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/tabuladb/tabula/internal/devtest"
	"github.com/tabuladb/tabula/storage/cluster"
)

// env is a tabula dev in this process, with the official Cloud Bigtable
// clients connected to it: the reference the jobs are checked against.
type env struct {
	*devtest.Server
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
	s := devtest.StartT(t, cluster.DevConfig{BlockCacheBytes: -1, ScanCacheBytes: -1})
	return &env{Server: s, addr: s.Addr, admin: s.Admin, data: s.Data, ctx: ctx}
}

// createTable creates table with families and split keys.
func (e *env) createTable(t testing.TB, table string, families []string, splits ...string) {
	t.Helper()
	if err := e.CreateTable(e.ctx, table, families, splits...); err != nil {
		t.Fatal(err)
	}
}

// cellDump is every cell of a table with its timestamp, in order: what
// "byte-identical" compares.
func (e *env) cellDump(t testing.TB, table string) []string {
	t.Helper()
	out, err := e.CellDump(e.ctx, table)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// splitKeys returns n-1 keys splitting "row%05d" keys evenly.
var splitKeys = devtest.SplitKeys
