//go:build !linux

package commitlog

import "os"

// setDirect reports false: direct I/O is used on Linux only, and f keeps
// ordinary buffered writes.
func setDirect(f *os.File) bool { return false }

// unsetDirect reports true: f never had direct I/O.
func unsetDirect(f *os.File) bool { return true }
