//go:build integration

package tablet

import (
	"testing"

	"github.com/tabuladb/tabula/storage/blob/blobtest"
)

// TestModelS3 runs a short model sequence with the SSTables, the states
// and the commit log in a real MinIO (the test script provides it).
func TestModelS3(t *testing.T) {
	store := blobtest.NewS3(t)
	counts := runModelWith(t, 3, 2000, store)
	t.Logf("%v", counts)
}
