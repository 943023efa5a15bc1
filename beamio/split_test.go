package beamio

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/metrics"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/passert"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"

	"github.com/tabuladb/tabula/beamio/keyrange"
	"github.com/tabuladb/tabula/internal/devtest"
)

// counter returns the committed value of a beamio counter.
func counter(pr beam.PipelineResult, name string) int64 {
	var n int64
	for _, c := range pr.Metrics().Query(func(r metrics.SingleResult) bool {
		return r.Namespace() == "beamio" && r.Name() == name
	}).Counters() {
		n += c.Result()
	}
	return n
}

// TestReadSplitsDynamically reads one restriction (a one-tablet table,
// one initial split) and stalls it part way until prism, seeing a bundle
// that makes no progress, splits it: the tracker gives a residual away,
// and the output is still exactly the table.
func TestReadSplitsDynamically(t *testing.T) {
	const table = "dynsplit"
	dev.CreateTable(t, table, []string{"f", "g"})
	dev.WriteRows(t, table, devtest.Rows(3000))
	want := dev.ReadRows(t, table, bigtable.InfiniteRange(""))

	var once sync.Once
	var stalled atomic.Bool
	beforeClaimHook = func(rt *keyrange.Tracker, key []byte) {
		if string(key) != "r00500" {
			return
		}
		once.Do(func() {
			stalled.Store(true)
			// Prism asks for a split after two progress reports without
			// progress (100 ms apart); give it up to a minute.
			deadline := time.Now().Add(time.Minute)
			for rt.Splits() == 0 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	t.Cleanup(func() { beforeClaimHook = nil })

	p, s := beam.NewPipelineWithRoot()
	rows := Read(s, ReadConfig{Table: Table{Addr: dev.Addr, Table: table}, BundleBytes: 1 << 40})
	passert.Equals(s, beam.ParDo(s, rowDigest, rows), devtest.Digests(want)...)
	pr, err := ptest.RunWithMetrics(p)
	if err != nil {
		t.Fatalf("pipeline: %v", err)
	}
	if !stalled.Load() {
		t.Fatal("the read never reached the row where it stalls")
	}
	if n := counter(pr, "read_restrictions"); n < 2 {
		t.Errorf("%d restrictions processed, want the initial one and at least one residual", n)
	}
	if n := counter(pr, "read_dynamic_splits"); n < 1 {
		t.Fatalf("no dynamic split recorded by the tracker (read_dynamic_splits = %d)", n)
	}
	if n := counter(pr, "read_rows"); n != int64(len(want)) {
		t.Fatalf("read_rows = %d, want %d", n, len(want))
	}
}

// TestReadWhileTabletsSplit reads a table whose tablets split under the
// read: writers grow the very tablets being read with rows of family h
// between the read rows ("r00123-w…"), pushing them over the dev
// server's 1 MiB split threshold, while the reads ask for families f and
// g only — rows with none of those cells are not returned — so the
// expected set is well defined: the f and g cells of the "r…" rows, which
// do not change.
func TestReadWhileTabletsSplit(t *testing.T) {
	const table = "splitting"
	dev.CreateTable(t, table, []string{"f", "g", "h"}, "r00250", "r00500", "r00750", "s")
	dev.WriteRows(t, table, devtest.Rows(1000))
	readRange := bigtable.NewRange("r", "s")
	want := dev.ReadRows(t, table, readRange, bigtable.RowFilter(bigtable.FamilyFilter("f|g")))
	before := tabletCount(t, table)

	// Writers: 4 × 500 rows of 4 KiB (8 MB) into the read tablets.
	ctx, cancel := context.WithCancel(devtest.Context(t))
	defer cancel()
	var wg sync.WaitGroup
	var written atomic.Int64
	writeErr := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tbl := dev.Data.Open(table)
			val := make([]byte, 4<<10)
			for i := 0; i < 500 && ctx.Err() == nil; i += 20 {
				var keys []string
				var muts []*bigtable.Mutation
				for j := i; j < i+20; j++ {
					m := bigtable.NewMutation()
					m.Set("h", "big", bigtable.Timestamp(1_000_000), val)
					keys = append(keys, fmt.Sprintf("r%05d-w%d", (j*2+w*500)%1000, w))
					muts = append(muts, m)
				}
				errs, err := tbl.ApplyBulk(ctx, keys, muts)
				if err == nil && errs != nil {
					err = fmt.Errorf("%v", errs)
				}
				if err != nil {
					if ctx.Err() == nil {
						writeErr <- err
					}
					return
				}
				written.Add(int64(len(keys)))
			}
		}()
	}
	writersDone := make(chan struct{})
	go func() { wg.Wait(); close(writersDone) }()
	// Reads while the writers run (at least three).
	rounds := 0
	for ; ; rounds++ {
		select {
		case <-writersDone:
			if rounds >= 3 {
				goto done
			}
		default:
		}
		p, s := beam.NewPipelineWithRoot()
		rows := Read(s, ReadConfig{Table: Table{Addr: dev.Addr, Table: table}, Ranges: []RowRange{{Start: []byte("r"), End: []byte("s")}},
			Families: []string{"f", "g"}, BundleBytes: 64 << 10})
		passert.Equals(s, beam.ParDo(s, rowDigest, rows), devtest.Digests(want)...)
		if err := ptest.Run(p); err != nil {
			t.Fatalf("round %d: %v", rounds, err)
		}
	}
done:
	close(writeErr)
	for err := range writeErr {
		t.Fatalf("writer: %v", err)
	}
	after := tabletCount(t, table)
	if after <= before {
		t.Fatalf("tablets: %d before, %d after %d writes: the table did not split", before, after, written.Load())
	}
	// The whole grown table against the reference.
	all := dev.ReadRows(t, table, bigtable.InfiniteRange(""))
	p, s := beam.NewPipelineWithRoot()
	rows := Read(s, ReadConfig{Table: Table{Addr: dev.Addr, Table: table}, BundleBytes: 256 << 10})
	passert.Equals(s, beam.ParDo(s, rowDigest, rows), devtest.Digests(all)...)
	if err := ptest.Run(p); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d tablets before, %d after; %d rows written into them during %d reads", before, after, written.Load(), rounds)
}

func tabletCount(t *testing.T, table string) int {
	t.Helper()
	c, err := (Table{Addr: dev.Addr, Table: table}).Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tabs, err := c.Tablets(devtest.Context(t), table)
	if err != nil {
		t.Fatal(err)
	}
	return len(tabs)
}
