package commitlog

import (
	"os"

	"golang.org/x/sys/unix"
)

// setDirect turns on O_DIRECT for f, so that a flush goes from the log's
// buffer to the disk without a copy into the page cache (nothing reads a
// segment back until recovery). It reports false, leaving f as it was,
// when the file system refuses direct I/O (tmpfs before Linux 6.6, some
// overlays): f then keeps ordinary buffered writes.
func setDirect(f *os.File) bool { return setFlag(f, unix.O_DIRECT, true) }

// unsetDirect turns O_DIRECT off for f again, reporting whether it could.
func unsetDirect(f *os.File) bool { return setFlag(f, unix.O_DIRECT, false) }

// setFlag sets or clears a file status flag of f (fcntl F_SETFL).
func setFlag(f *os.File, flag int, on bool) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	ok := false
	_ = rc.Control(func(fd uintptr) {
		flags, err := unix.FcntlInt(fd, unix.F_GETFL, 0)
		if err != nil {
			return
		}
		if on {
			flags |= flag
		} else {
			flags &^= flag
		}
		_, err = unix.FcntlInt(fd, unix.F_SETFL, flags)
		ok = err == nil
	})
	return ok
}
