package commitlog

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/cell"
)

// benchRecord is one SetCell of a value of the given size.
func benchRecord(i int, value []byte) Record {
	return Record{
		Tablet:   "bench/tablet-0",
		FirstSeq: uint64(i),
		Mutation: cell.RowMutation{
			Row:       fmt.Appendf(nil, "user%012d", i),
			Mutations: []cell.Mutation{cell.Set("cf", []byte("field0"), 1_700_000_000_000_000, value)},
		},
	}
}

// BenchmarkAppendParallel measures group commit on a local directory:
// many goroutines each write a record and wait for it to be durable. It
// reports records/s, MB/s of encoded log, and the mean records per flush
// (fsync) — the grouping factor.
func BenchmarkAppendParallel(b *testing.B) {
	for _, size := range []int{100, 1000} {
		b.Run(fmt.Sprintf("value=%d", size), func(b *testing.B) {
			benchAppend(b, size, true)
		})
	}
}

// BenchmarkAppendSerial is the baseline without group commit: one writer,
// so every record pays a whole fsync.
func BenchmarkAppendSerial(b *testing.B) {
	benchAppend(b, 1000, false)
}

func benchAppend(b *testing.B, size int, parallel bool) {
	l, err := Open(context.Background(), Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	value := make([]byte, size)
	b.SetBytes(int64(len(appendRecordFrame(nil, new(benchRecord(0, value))))))
	b.ReportAllocs()
	start := time.Now()
	b.ResetTimer()
	if parallel {
		// 32 writers per core: a tablet server has many concurrent
		// clients, and grouping needs writers queued behind a flush.
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if _, err := l.Write(context.Background(), benchRecord(i, value)); err != nil {
					b.Error(err)
					return
				}
				i++
			}
		})
	} else {
		for i := 0; i < b.N; i++ {
			if _, err := l.Write(context.Background(), benchRecord(i, value)); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	elapsed := time.Since(start)
	st := l.Stats()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
	if st.Flushes > 0 {
		b.ReportMetric(float64(st.FlushedRecords)/float64(st.Flushes), "records/flush")
	}
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
}
