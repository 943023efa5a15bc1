//go:build unix

package commitlog

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// processCPU is this process's user and system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkLocalFlush is one local segment's flush — write and fsync of
// a batch of frames — with direct I/O (as the log writes where the file
// system allows it) and buffered, at batch sizes from a single small
// write's to a bulk write's. It reports the process's CPU per flush
// (cpu-µs/flush): a buffered flush also copies the batch into the page
// cache, and its fsync writes that back, which a direct one does not.
func BenchmarkLocalFlush(b *testing.B) {
	for _, direct := range []bool{true, false} {
		for _, size := range []int{4 << 10, 64 << 10, 512 << 10, 1 << 20} {
			mode := map[bool]string{true: "direct", false: "buffered"}[direct]
			b.Run(fmt.Sprintf("%s/batch=%dKiB", mode, size>>10), func(b *testing.B) {
				if !direct {
					withBufferedIO(b)
				}
				l, _, err := openLocal(b.TempDir())
				if err != nil {
					b.Fatal(err)
				}
				defer l.close()
				if direct && !l.direct {
					b.Fatal("the file system of the test directory refuses O_DIRECT")
				}
				batch := make([]byte, size)
				for i := range batch {
					batch[i] = byte(i * 7)
				}
				b.SetBytes(int64(size))
				cpu := processCPU(b)
				b.ResetTimer()
				for range b.N {
					if l.size > 256<<20 { // keep the file bounded
						if err := l.rollover(l.seg + 1); err != nil {
							b.Fatal(err)
						}
					}
					if err := l.write(batch); err != nil {
						b.Fatal(err)
					}
					if err := l.f.Sync(); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64((processCPU(b)-cpu).Microseconds())/float64(b.N), "cpu-µs/flush")
			})
		}
	}
}
