// Package blobtest holds what tests of blob stores and of their users share:
// the conformance suite every blob.Store implementation passes, and NewS3,
// which gives an integration test a Store on a fresh bucket of the MinIO
// server the project's test script starts.
package blobtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tabuladb/tabula/storage/blob"
)

// LargeObjectSize is the size of the streamed object in the conformance
// suite: more than two S3 parts of the 5 MiB NewS3 uses, so the suite
// covers part boundaries and the final short part.
const LargeObjectSize = 12<<20 + 12345

// RunConformance runs the behaviour every blob.Store must have as subtests
// of t. newStore returns an empty store; it is called once per subtest.
func RunConformance(t *testing.T, newStore func(t *testing.T) blob.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s blob.Store)
	}{
		{"PutGet", testPutGet},
		{"Overwrite", testOverwrite},
		{"WriterSmall", testWriterSmall},
		{"WriterLarge", testWriterLarge},
		{"WriterAbort", testWriterAbort},
		{"WriterAbortKeepsOld", testWriterAbortKeepsOld},
		{"WriterUseAfterClose", testWriterUseAfterClose},
		{"ReadAt", testReadAt},
		{"List", testList},
		{"Delete", testDelete},
		{"NotExist", testNotExist},
		{"InvalidNames", testInvalidNames},
		{"CancelledContext", testCancelledContext},
		{"ConcurrentPutGet", testConcurrentPutGet},
		{"ConcurrentOverwrite", testConcurrentOverwrite},
		{"ConcurrentWriters", testConcurrentWriters},
		{"PutIfVersion", testPutIfVersion},
		{"ConcurrentPutIfVersion", testConcurrentPutIfVersion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, newStore(t)) })
	}
}

// pattern returns n bytes that differ with seed and position, so a read of
// the wrong range or the wrong object does not compare equal.
func pattern(seed, n int) []byte {
	r := rand.New(rand.NewPCG(uint64(seed), uint64(n)))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func mustPut(t *testing.T, s blob.Store, name string, data []byte) {
	t.Helper()
	if err := s.Put(t.Context(), name, data); err != nil {
		t.Fatalf("Put(%q, %d bytes): %v", name, len(data), err)
	}
}

func mustGet(t *testing.T, s blob.Store, name string, want []byte) {
	t.Helper()
	got, err := s.Get(t.Context(), name)
	if err != nil {
		t.Fatalf("Get(%q): %v", name, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Get(%q) = %d bytes %s, want %d bytes %s", name, len(got), head(got), len(want), head(want))
	}
}

func mustNotExist(t *testing.T, op string, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: got nil error, want ErrNotExist", op)
	}
	if !errors.Is(err, blob.ErrNotExist) || !errors.Is(err, fs.ErrNotExist) || !blob.IsNotExist(err) {
		t.Fatalf("%s: %v, want an error wrapping ErrNotExist", op, err)
	}
}

func head(b []byte) string {
	if len(b) > 16 {
		return fmt.Sprintf("%x...", b[:16])
	}
	return fmt.Sprintf("%x", b)
}

func names(attrs []blob.Attrs) []string {
	out := make([]string, len(attrs))
	for i, a := range attrs {
		out[i] = a.Name
	}
	return out
}

func mustList(t *testing.T, s blob.Store, prefix string, want ...string) []blob.Attrs {
	t.Helper()
	attrs, err := s.List(t.Context(), prefix)
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	if got := names(attrs); !slices.Equal(got, want) {
		t.Fatalf("List(%q) = %q, want %q", prefix, got, want)
	}
	return attrs
}

func testPutGet(t *testing.T, s blob.Store) {
	data := pattern(1, 1000)
	buf := bytes.Clone(data)
	mustPut(t, s, "dir/obj", buf)
	buf[0] ^= 0xff // the store must have copied
	mustGet(t, s, "dir/obj", data)

	got, err := s.Get(t.Context(), "dir/obj")
	if err != nil {
		t.Fatal(err)
	}
	got[1] ^= 0xff // nor may the caller's copy alias the store
	mustGet(t, s, "dir/obj", data)

	mustPut(t, s, "empty", nil)
	mustGet(t, s, "empty", []byte{})
	attrs := mustList(t, s, "", "dir/obj", "empty")
	if attrs[0].Size != 1000 || attrs[1].Size != 0 {
		t.Fatalf("List sizes = %d, %d; want 1000, 0", attrs[0].Size, attrs[1].Size)
	}
}

func testOverwrite(t *testing.T, s blob.Store) {
	mustPut(t, s, "x/y", pattern(1, 500))
	mustPut(t, s, "x/y", pattern(2, 300))
	mustGet(t, s, "x/y", pattern(2, 300))
	attrs := mustList(t, s, "x/", "x/y")
	if attrs[0].Size != 300 {
		t.Fatalf("size after overwrite = %d, want 300", attrs[0].Size)
	}

	w, err := s.Create(t.Context(), "x/y")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(pattern(3, 10)); err != nil {
		t.Fatal(err)
	}
	// Until Close the old object is what readers see.
	mustGet(t, s, "x/y", pattern(2, 300))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	mustGet(t, s, "x/y", pattern(3, 10))
}

func testWriterSmall(t *testing.T, s blob.Store) {
	data := pattern(4, 10000)
	w, err := s.Create(t.Context(), "small/obj")
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(data); off += 777 {
		n, err := w.Write(data[off:min(off+777, len(data))])
		if err != nil || n != min(777, len(data)-off) {
			t.Fatalf("Write at %d = %d, %v", off, n, err)
		}
	}
	_, err = s.Get(t.Context(), "small/obj")
	mustNotExist(t, "Get before Close", err)
	mustList(t, s, "")
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	mustGet(t, s, "small/obj", data)

	// A writer that writes nothing makes an empty object.
	w, err = s.Create(t.Context(), "small/empty")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close empty: %v", err)
	}
	mustGet(t, s, "small/empty", []byte{})
}

func testWriterLarge(t *testing.T, s blob.Store) {
	data := pattern(5, LargeObjectSize)
	w, err := s.Create(t.Context(), "large/obj")
	if err != nil {
		t.Fatal(err)
	}
	// Uneven write sizes, including one larger than a part, so writes
	// straddle part boundaries.
	sizes := []int{1, 100003, 7 << 20, 4096, 65536}
	for off, i := 0, 0; off < len(data); i++ {
		n := min(sizes[i%len(sizes)], len(data)-off)
		if _, err := w.Write(data[off : off+n]); err != nil {
			t.Fatalf("Write at %d: %v", off, err)
		}
		off += n
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	mustGet(t, s, "large/obj", data)
	attrs := mustList(t, s, "large/", "large/obj")
	if attrs[0].Size != int64(len(data)) {
		t.Fatalf("List size = %d, want %d", attrs[0].Size, len(data))
	}

	obj, err := s.Open(t.Context(), "large/obj")
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	if obj.Size() != int64(len(data)) {
		t.Fatalf("Size = %d, want %d", obj.Size(), len(data))
	}
	// Ranges across the 5 MiB part boundaries and at the end.
	for _, off := range []int{0, 5<<20 - 100, 10<<20 - 1, len(data) - 1000} {
		p := make([]byte, 1000)
		n, err := obj.ReadAt(p, int64(off))
		if n != len(p) || (err != nil && !(err == io.EOF && off+n == len(data))) {
			t.Fatalf("ReadAt(1000, %d) = %d, %v", off, n, err)
		}
		if !bytes.Equal(p, data[off:off+1000]) {
			t.Fatalf("ReadAt(1000, %d): wrong bytes", off)
		}
	}
}

func testWriterAbort(t *testing.T, s blob.Store) {
	for _, size := range []int{100, LargeObjectSize} {
		name := fmt.Sprintf("abort/%d", size)
		w, err := s.Create(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(pattern(6, size)); err != nil {
			t.Fatal(err)
		}
		if err := w.Abort(); err != nil {
			t.Fatalf("Abort after %d bytes: %v", size, err)
		}
		_, err = s.Get(t.Context(), name)
		mustNotExist(t, "Get after Abort", err)
	}
	mustList(t, s, "")
}

func testWriterAbortKeepsOld(t *testing.T, s blob.Store) {
	mustPut(t, s, "keep", pattern(7, 100))
	w, err := s.Create(t.Context(), "keep")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(pattern(8, 200)); err != nil {
		t.Fatal(err)
	}
	if err := w.Abort(); err != nil {
		t.Fatal(err)
	}
	mustGet(t, s, "keep", pattern(7, 100))
	mustList(t, s, "", "keep")
}

func testWriterUseAfterClose(t *testing.T, s blob.Store) {
	w, err := s.Create(t.Context(), "done")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("x")); err == nil {
		t.Error("Write after Close succeeded")
	}
	if err := w.Close(); err == nil {
		t.Error("second Close succeeded")
	}
	if err := w.Abort(); err == nil {
		t.Error("Abort after Close succeeded")
	}
	mustGet(t, s, "done", []byte{})
}

func testReadAt(t *testing.T, s blob.Store) {
	data := pattern(9, 1000)
	mustPut(t, s, "r/obj", data)
	obj, err := s.Open(t.Context(), "r/obj")
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	if obj.Size() != 1000 {
		t.Fatalf("Size = %d, want 1000", obj.Size())
	}
	tests := []struct {
		off, len int
		wantN    int
		wantEOF  bool // true: must be io.EOF; false: must be nil unless the read ends at the end
	}{
		{0, 10, 10, false},
		{500, 100, 100, false},
		{990, 10, 10, false}, // ends exactly at the end: nil or io.EOF
		{0, 1000, 1000, false},
		{995, 10, 5, true}, // straddles the end
		{0, 2000, 1000, true},
		{1000, 10, 0, true}, // starts at the end
		{5000, 10, 0, true}, // starts past the end
		{100, 0, 0, false},  // empty read
	}
	for _, tt := range tests {
		p := make([]byte, tt.len)
		n, err := obj.ReadAt(p, int64(tt.off))
		atEnd := tt.off+n == len(data)
		switch {
		case n != tt.wantN:
			t.Errorf("ReadAt(len %d, off %d) n = %d, want %d (err %v)", tt.len, tt.off, n, tt.wantN, err)
		case tt.wantEOF && err != io.EOF:
			t.Errorf("ReadAt(len %d, off %d) err = %v, want io.EOF", tt.len, tt.off, err)
		case !tt.wantEOF && err != nil && !(err == io.EOF && atEnd && tt.len > 0):
			t.Errorf("ReadAt(len %d, off %d) err = %v, want nil", tt.len, tt.off, err)
		case !bytes.Equal(p[:n], data[min(tt.off, len(data)):min(tt.off, len(data))+n]):
			t.Errorf("ReadAt(len %d, off %d): wrong bytes", tt.len, tt.off)
		}
	}

	// An open object reads the same concurrently from many goroutines.
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			p := make([]byte, 50)
			off := g * 100
			if n, err := obj.ReadAt(p, int64(off)); n != 50 || err != nil || !bytes.Equal(p, data[off:off+50]) {
				t.Errorf("concurrent ReadAt(50, %d) = %d, %v", off, n, err)
			}
		})
	}
	wg.Wait()

	mustPut(t, s, "r/empty", nil)
	empty, err := s.Open(t.Context(), "r/empty")
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	if n, err := empty.ReadAt(make([]byte, 1), 0); empty.Size() != 0 || n != 0 || err != io.EOF {
		t.Errorf("empty object: Size %d, ReadAt = %d, %v; want 0, 0, io.EOF", empty.Size(), n, err)
	}
}

func testList(t *testing.T, s blob.Store) {
	// Byte order: '-' (0x2d) < '/' (0x2f) < '0' < 'b', so a walk that
	// visits directories depth-first would get this wrong.
	all := []string{"a-x", "a/1", "a/2", "a/b/3", "a/b/c/4", "a0", "ab", "b/1", "tables/t1/sst/000001.sst"}
	for i, name := range slices.Backward(all) {
		mustPut(t, s, name, pattern(i, i+1))
	}
	mustList(t, s, "", all...)
	mustList(t, s, "a/", "a/1", "a/2", "a/b/3", "a/b/c/4")
	mustList(t, s, "a", "a-x", "a/1", "a/2", "a/b/3", "a/b/c/4", "a0", "ab")
	mustList(t, s, "a/b", "a/b/3", "a/b/c/4")
	mustList(t, s, "a/b/", "a/b/3", "a/b/c/4")
	mustList(t, s, "a/b/c/4", "a/b/c/4")
	mustList(t, s, "tables/t1/s", "tables/t1/sst/000001.sst")
	mustList(t, s, "b/1/")
	mustList(t, s, "zzz")
	mustList(t, s, "c/")
	// Prefixes no valid name has: nothing, and no error.
	mustList(t, s, "a//")
	mustList(t, s, "../")
	mustList(t, s, "a\\")
	attrs := mustList(t, s, "a/b/", "a/b/3", "a/b/c/4")
	for _, a := range attrs {
		i := slices.Index(all, a.Name)
		if a.Size != int64(i+1) {
			t.Errorf("List: %s size %d, want %d", a.Name, a.Size, i+1)
		}
	}
}

func testDelete(t *testing.T, s blob.Store) {
	mustPut(t, s, "d/a/1", []byte("1"))
	mustPut(t, s, "d/a/2", []byte("2"))
	mustPut(t, s, "d/b", []byte("3"))
	if err := s.Delete(t.Context(), "d/a/1"); err != nil {
		t.Fatal(err)
	}
	_, err := s.Get(t.Context(), "d/a/1")
	mustNotExist(t, "Get after Delete", err)
	mustNotExist(t, "second Delete", s.Delete(t.Context(), "d/a/1"))
	mustList(t, s, "d/", "d/a/2", "d/b")
	mustGet(t, s, "d/a/2", []byte("2"))

	// Deleting the last object under a prefix and writing there again.
	if err := s.Delete(t.Context(), "d/a/2"); err != nil {
		t.Fatal(err)
	}
	mustList(t, s, "d/", "d/b")
	mustPut(t, s, "d/a/3", []byte("4"))
	mustList(t, s, "d/", "d/a/3", "d/b")

	// A prefix of existing names is not an object.
	mustNotExist(t, "Delete of a prefix", s.Delete(t.Context(), "d/a"))
	mustList(t, s, "d/", "d/a/3", "d/b")
}

func testNotExist(t *testing.T, s blob.Store) {
	mustPut(t, s, "present/x", []byte("x"))
	for _, name := range []string{"missing", "present", "present/x/y", "present/y"} {
		_, err := s.Get(t.Context(), name)
		mustNotExist(t, "Get "+name, err)
		if !strings.Contains(err.Error(), name) {
			t.Errorf("Get(%q) error %q does not name the object", name, err)
		}
		_, err = s.Open(t.Context(), name)
		mustNotExist(t, "Open "+name, err)
		mustNotExist(t, "Delete "+name, s.Delete(t.Context(), name))
	}
}

func testInvalidNames(t *testing.T, s blob.Store) {
	for _, name := range []string{"", "/abs", "a//b", "a/", "..", "../x", "a/../b", "./a", "a/.", "a\\b", "a\x00b"} {
		err := s.Put(t.Context(), name, []byte("x"))
		if !errors.Is(err, blob.ErrInvalidName) {
			t.Errorf("Put(%q) = %v, want ErrInvalidName", name, err)
		}
		if _, err := s.Create(t.Context(), name); !errors.Is(err, blob.ErrInvalidName) {
			t.Errorf("Create(%q) = %v, want ErrInvalidName", name, err)
		}
		if _, err := s.Get(t.Context(), name); !errors.Is(err, blob.ErrInvalidName) {
			t.Errorf("Get(%q) = %v, want ErrInvalidName", name, err)
		}
	}
	mustList(t, s, "")
}

func testCancelledContext(t *testing.T, s blob.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.Put(ctx, "cancelled", []byte("x")); err == nil {
		t.Error("Put with a cancelled context succeeded")
	}
	_, err := s.Get(t.Context(), "cancelled")
	mustNotExist(t, "Get after cancelled Put", err)
}

func testConcurrentPutGet(t *testing.T, s blob.Store) {
	const goroutines, perG = 8, 20
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range perG {
				name := fmt.Sprintf("c/%d/%03d", g, i)
				data := pattern(g*1000+i, 100+i)
				if err := s.Put(t.Context(), name, data); err != nil {
					t.Errorf("Put(%q): %v", name, err)
					return
				}
				got, err := s.Get(t.Context(), name)
				if err != nil || !bytes.Equal(got, data) {
					t.Errorf("Get(%q) after Put = %d bytes, %v", name, len(got), err)
					return
				}
			}
		})
	}
	wg.Wait()
	attrs, err := s.List(t.Context(), "c/")
	if err != nil {
		t.Fatal(err)
	}
	if len(attrs) != goroutines*perG {
		t.Fatalf("List after concurrent puts: %d objects, want %d", len(attrs), goroutines*perG)
	}
}

// testConcurrentOverwrite checks that readers see whole objects while a name
// is overwritten: every version is one repeated byte with its own length.
func testConcurrentOverwrite(t *testing.T, s blob.Store) {
	version := func(v int) []byte { return bytes.Repeat([]byte{byte(v)}, 1000+v) }
	mustPut(t, s, "hot", version(0))
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := range 20 {
				if err := s.Put(t.Context(), "hot", version(1+w*20+i)); err != nil {
					t.Errorf("Put: %v", err)
					return
				}
			}
		})
	}
	for range 4 {
		wg.Go(func() {
			for range 40 {
				got, err := s.Get(t.Context(), "hot")
				if err != nil {
					t.Errorf("Get: %v", err)
					return
				}
				if len(got) < 1000 || !bytes.Equal(got, version(len(got)-1000)) {
					t.Errorf("Get saw a torn object of %d bytes starting %s", len(got), head(got))
					return
				}
			}
		})
	}
	wg.Wait()
}

// testConcurrentWriters streams several writers to one name at once: each
// Close replaces the object whole, and the survivor is one of them intact.
func testConcurrentWriters(t *testing.T, s blob.Store) {
	const writers = 4
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			wr, err := s.Create(t.Context(), "same/name")
			if err != nil {
				t.Errorf("Create: %v", err)
				return
			}
			data := pattern(100+w, 50000)
			for off := 0; off < len(data); off += 5000 {
				if _, err := wr.Write(data[off : off+5000]); err != nil {
					t.Errorf("Write: %v", err)
					wr.Abort()
					return
				}
			}
			if err := wr.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
	wg.Wait()
	got, err := s.Get(t.Context(), "same/name")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for w := range writers {
		found = found || bytes.Equal(got, pattern(100+w, 50000))
	}
	if !found {
		t.Fatalf("after concurrent writers the object (%d bytes, %s) is none of theirs", len(got), head(got))
	}
	mustList(t, s, "", "same/name")
}

func versioned(t *testing.T, s blob.Store) blob.Versioned {
	t.Helper()
	v, ok := s.(blob.Versioned)
	if !ok {
		t.Fatalf("%T does not implement blob.Versioned", s)
	}
	return v
}

// testPutIfVersion: the compare-and-swap of whole objects. A write at the
// version read succeeds and gives a new version; one at a stale version,
// or expecting absence of an object that exists, or expecting an object
// that was deleted, fails with ErrVersionMismatch and changes nothing.
func testPutIfVersion(t *testing.T, s blob.Store) {
	ctx := t.Context()
	vs := versioned(t, s)
	const name = "state/t1.tablet"
	_, _, err := vs.GetVersion(ctx, name)
	mustNotExist(t, "GetVersion of an absent object", err)
	if _, err := vs.PutIfVersion(ctx, name, []byte("one"), "stale"); !errors.Is(err, blob.ErrVersionMismatch) {
		t.Fatalf("PutIfVersion of an absent object at a version: %v, want ErrVersionMismatch", err)
	}
	mustNotExist(t, "Get after a refused PutIfVersion", func() error { _, err := s.Get(ctx, name); return err }())
	v1, err := vs.PutIfVersion(ctx, name, []byte("one"), "")
	if err != nil || v1 == "" {
		t.Fatalf("PutIfVersion creating: %q, %v", v1, err)
	}
	if _, err := vs.PutIfVersion(ctx, name, []byte("other"), ""); !errors.Is(err, blob.ErrVersionMismatch) {
		t.Fatalf("PutIfVersion expecting absence of an existing object: %v, want ErrVersionMismatch", err)
	}
	data, got, err := vs.GetVersion(ctx, name)
	if err != nil || string(data) != "one" || got != v1 {
		t.Fatalf("GetVersion = %q, %q, %v; want \"one\" at %q", data, got, err, v1)
	}
	v2, err := vs.PutIfVersion(ctx, name, []byte("two"), v1)
	if err != nil || v2 == "" || v2 == v1 {
		t.Fatalf("PutIfVersion at the version read: %q, %v (previous %q)", v2, err, v1)
	}
	// The writer that read v1 and comes late is refused.
	if _, err := vs.PutIfVersion(ctx, name, []byte("late"), v1); !errors.Is(err, blob.ErrVersionMismatch) {
		t.Fatalf("PutIfVersion at a stale version: %v, want ErrVersionMismatch", err)
	}
	mustGet(t, s, name, []byte("two"))
	// An unconditional Put changes the version too.
	mustPut(t, s, name, []byte("three"))
	if _, err := vs.PutIfVersion(ctx, name, []byte("late"), v2); !errors.Is(err, blob.ErrVersionMismatch) {
		t.Fatalf("PutIfVersion after a Put: %v, want ErrVersionMismatch", err)
	}
	if err := s.Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := vs.PutIfVersion(ctx, name, []byte("late"), v2); !errors.Is(err, blob.ErrVersionMismatch) {
		t.Fatalf("PutIfVersion of a deleted object: %v, want ErrVersionMismatch", err)
	}
	mustNotExist(t, "Get after a refused PutIfVersion of a deleted object", func() error { _, err := s.Get(ctx, name); return err }())
}

// testConcurrentPutIfVersion: writers that all read the same version race
// to replace it; exactly one wins.
func testConcurrentPutIfVersion(t *testing.T, s blob.Store) {
	ctx := t.Context()
	vs := versioned(t, s)
	const name = "state/race.tablet"
	v0, err := vs.PutIfVersion(ctx, name, []byte("base"), "")
	if err != nil {
		t.Fatal(err)
	}
	const writers = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	var won []string
	for i := range writers {
		wg.Go(func() {
			data := fmt.Sprintf("writer %d", i)
			_, err := vs.PutIfVersion(ctx, name, []byte(data), v0)
			switch {
			case err == nil:
				mu.Lock()
				won = append(won, data)
				mu.Unlock()
			case !errors.Is(err, blob.ErrVersionMismatch):
				t.Errorf("writer %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if len(won) != 1 {
		t.Fatalf("%d writers won the same version: %q, want exactly 1", len(won), won)
	}
	mustGet(t, s, name, []byte(won[0]))
}
