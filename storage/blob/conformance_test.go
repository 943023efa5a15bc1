package blob_test

import (
	"testing"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/blob/blobtest"
)

func TestMemoryConformance(t *testing.T) {
	blobtest.RunConformance(t, func(t *testing.T) blob.Store { return blob.NewMemory() })
}

func TestLocalConformance(t *testing.T) {
	blobtest.RunConformance(t, func(t *testing.T) blob.Store {
		s, err := blob.NewLocal(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
