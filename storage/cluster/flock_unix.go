//go:build unix

package cluster

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockFile takes an exclusive flock on f without waiting: errLockHeld if
// another open file description holds it. The kernel drops it when the
// process dies, or when f is closed.
func lockFile(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	switch {
	case errors.Is(err, syscall.EWOULDBLOCK):
		return errLockHeld
	case err != nil:
		return fmt.Errorf("cluster: locking %s: %w", f.Name(), err)
	}
	return nil
}
