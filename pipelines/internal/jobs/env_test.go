package jobs

import (
	"os"
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
		benchDev.Close()
		return code
	}))
}

// benchDev is the benchmarks' server (the shared one splits tablets at
// 1 MiB), started by the first benchmark that asks for it.
var benchDev = devtest.NewLazy(devtest.BenchConfig)
