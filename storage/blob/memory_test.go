package blob_test

import (
	"testing"

	"github.com/tabuladb/tabula/storage/blob"
)

func TestMemorySmoke(t *testing.T) {
	ctx := t.Context()
	s := blob.NewMemory()
	buf := []byte("hello")
	if err := s.Put(ctx, "a/b", buf); err != nil {
		t.Fatal(err)
	}
	buf[0] = 'j' // Put must have copied
	got, err := s.Get(ctx, "a/b")
	if err != nil || string(got) != "hello" {
		t.Fatalf("Get = %q, %v; want hello", got, err)
	}
	if _, err := s.Get(ctx, "missing"); !blob.IsNotExist(err) {
		t.Fatalf("Get missing: %v, want ErrNotExist", err)
	}
}
