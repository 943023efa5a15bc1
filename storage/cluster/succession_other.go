//go:build !unix

package cluster

import (
	"errors"
	"os"
)

// lockFile: without flock(2) no lock proves a predecessor's exit, and no
// server claims one.
func lockFile(*os.File) error {
	return errors.New("cluster: succession locks need flock(2)")
}
