package beamio

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"

	"github.com/tabuladb/tabula/internal/devtest"
	"github.com/tabuladb/tabula/storage/cluster"
)

// testSplitBytes makes tablets of the shared dev server split once they
// hold this much: small, so that the split test can grow tablets past it
// with a few MB; the other tests' tables stay below it.
const testSplitBytes = 1 << 20

// dev is the one in-process tabula dev of the test binary, with the
// official Cloud Bigtable clients on it; the tests run on prism.
var dev *devtest.Server

func TestMain(m *testing.M) {
	cfg := cluster.DevConfig{SplitBytes: testSplitBytes, MemtableBytes: 256 << 10}
	os.Exit(devtest.Main(cfg, &dev, func() int {
		code := ptest.MainRetWithDefault(m, "prism")
		if benchDev != nil {
			benchDev.Close()
		}
		return code
	}))
}

// benchDev is the benchmarks' server, started by the first benchmark
// that needs it: tabula dev's defaults but for a 4 MiB memtable, so that
// a benchmark table keeps the tablets it is created with and lies mostly
// in SSTables, as a table on disk does. (The shared server splits
// tablets at 1 MiB for the split test: a 90 MB benchmark table became
// 130–160 tablets of 1 MB, and went on splitting while measured.)
var (
	benchDev     *devtest.Server
	benchDevOnce sync.Once
)

func benchServer(b *testing.B) *devtest.Server {
	benchDevOnce.Do(func() {
		s, err := devtest.Start(context.Background(), cluster.DevConfig{MemtableBytes: 4 << 20})
		if err != nil {
			b.Fatal(err)
		}
		benchDev = s
	})
	if benchDev == nil {
		b.Fatal("the benchmarks' server did not start")
	}
	return benchDev
}
