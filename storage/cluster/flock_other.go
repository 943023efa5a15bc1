//go:build !unix

package cluster

import (
	"errors"
	"os"
)

// lockFile: without flock(2) there is no lock that the kernel drops when
// its holder dies.
func lockFile(*os.File) error {
	return errors.New("cluster: file locks need flock(2)")
}
