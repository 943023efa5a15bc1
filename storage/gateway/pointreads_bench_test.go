package gateway

import (
	"runtime"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
)

// BenchmarkForwardedPointRead: single-row reads of rows B owns, sent by
// the official client to A, which forwards them over its point-read
// stream to B — client, entry and owner in this process, 32 reads in
// flight. cpu-µs/op is the process's CPU per read (all three parts);
// "last" has B answer each read in one frame (frameLast), "separate" as
// an older entry asks, a response frame and an end frame; "filtered"
// reads as `tabula bench` does (a family and the latest version: the
// filter chain every reader sends).
func BenchmarkForwardedPointRead(b *testing.B) {
	for _, tc := range []struct {
		name        string
		separateEnd bool
		filtered    bool
	}{{"last", false, false}, {"separate", true, false}, {"filtered", false, true}} {
		b.Run(tc.name, func(b *testing.B) {
			c := newGWCluster(b)
			gwFill(b, c)
			c.a.gw.pointReads(c.b.addr).separateEnd = tc.separateEnd
			inB := []string{"n", "p", "r", "t"}
			if _, err := c.tbl.ReadRow(c.ctx, "n"); err != nil { // opens the stream
				b.Fatal(err)
			}
			var opts []bigtable.ReadOption
			if tc.filtered {
				opts = append(opts, bigtable.RowFilter(bigtable.ChainFilters(bigtable.FamilyFilter("f"), bigtable.LatestNFilter(1))))
			}
			b.SetParallelism(max(1, 32/runtime.GOMAXPROCS(0)))
			cpu0 := processCPU(b)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if _, err := c.tbl.ReadRow(c.ctx, inB[i%len(inB)], opts...); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
			b.StopTimer()
			b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// processCPU is the process's user and system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
