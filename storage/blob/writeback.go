package blob

import (
	"os"
)

// writebackEvery is how many bytes a local Writer lets pile up in the page
// cache before it asks the kernel to start writing them to the disk.
const writebackEvery = 1 << 20

// writebackWriter writes to a file and, every writebackEvery bytes, starts
// the kernel's writeback of what it wrote since, without waiting for it
// (startWriteback).
//
// Why: on a machine with much memory the kernel keeps a new file's pages
// dirty until its fsync, and the fsync of a large SSTable then sends tens of
// megabytes to the disk at once. Every fdatasync of the commit log that
// comes meanwhile waits behind them, and with it every write in flight. Sent
// as the file is written, little is left for its fsync. The fsync stays the
// only point of durability: writeback started early changes when bytes
// reach the disk, not what is durable when.
type writebackWriter struct {
	f      *os.File
	off    int64 // bytes written
	synced int64 // writeback started up to here
}

func (w *writebackWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.off += int64(n)
	if w.off-w.synced >= writebackEvery {
		startWriteback(w.f, w.synced, w.off-w.synced)
		w.synced = w.off
	}
	return n, err
}
