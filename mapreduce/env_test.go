package mapreduce_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/tabuladb/tabula/internal/devtest"
	"github.com/tabuladb/tabula/storage/cluster"
)

// env is a tabula dev in this process, with the official Cloud Bigtable
// clients connected to it (the reference the jobs are checked against),
// and a context for the test's calls.
type env struct {
	*devtest.Server
	ctx context.Context
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func startEnv(t testing.TB) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return &env{Server: devtest.StartT(t, cluster.DevConfig{BlockCacheBytes: -1, ScanCacheBytes: -1}), ctx: ctx}
}
