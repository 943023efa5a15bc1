package blob

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to start writing bytes [off, off+n) of f
// back to the disk and returns at once (sync_file_range with
// SYNC_FILE_RANGE_WRITE). It is advice: a failure changes nothing the
// caller relies on (its fsync still makes the file durable) and is
// ignored. A variable so that tests can watch it.
var startWriteback = func(f *os.File, off, n int64) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_ = unix.SyncFileRange(int(fd), off, n, unix.SYNC_FILE_RANGE_WRITE)
	})
}
