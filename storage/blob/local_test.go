package blob_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tabuladb/tabula/storage/blob"
)

func newLocal(t *testing.T) (blob.Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := blob.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s, dir
}

// files lists every file and directory under dir, relative, slash-separated.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != dir {
			rel, _ := filepath.Rel(dir, path)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestLocalLayoutAndReopen(t *testing.T) {
	s, dir := newLocal(t)
	if err := s.Put(t.Context(), "tables/t1/000001.sst", []byte("sst")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "tables", "t1", "000001.sst")
	data, err := os.ReadFile(path)
	if err != nil || string(data) != "sst" {
		t.Fatalf("object file = %q, %v", data, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("object file mode = %v, %v; want 0644 like an ordinary file", fi.Mode(), err)
	}
	// A new store on the same directory sees what the first one wrote.
	s2, err := blob.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s2.Get(t.Context(), "tables/t1/000001.sst")
	if err != nil || string(got) != "sst" {
		t.Fatalf("reopened Get = %q, %v", got, err)
	}
}

func TestLocalTempFilesInvisible(t *testing.T) {
	s, dir := newLocal(t)
	w, err := s.Create(t.Context(), "a/obj")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("pending")); err != nil {
		t.Fatal(err)
	}
	fs := files(t, dir)
	if len(fs) != 2 || fs[0] != "a" || !strings.HasPrefix(fs[1], "a/.tabula-tmp-") {
		t.Fatalf("files while writing = %q, want a and one temporary file in it", fs)
	}
	attrs, err := s.List(t.Context(), "")
	if err != nil || len(attrs) != 0 {
		t.Fatalf("List while writing = %v, %v; want nothing", attrs, err)
	}
	if err := w.Abort(); err != nil {
		t.Fatal(err)
	}
	if fs := files(t, dir); !slices.Equal(fs, []string{"a"}) {
		t.Fatalf("files after Abort = %q, want only the directory", fs)
	}

	// Temporary names are reserved, so no object can shadow or be one.
	for _, name := range []string{".tabula-tmp-1", "a/.tabula-tmp-x/b"} {
		if err := s.Put(t.Context(), name, nil); !errors.Is(err, blob.ErrInvalidName) {
			t.Errorf("Put(%q) = %v, want ErrInvalidName", name, err)
		}
	}
}

func TestLocalDeleteRemovesEmptyDirs(t *testing.T) {
	s, dir := newLocal(t)
	for _, name := range []string{"x/y/z/1", "x/y/2"} {
		if err := s.Put(t.Context(), name, []byte(name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(t.Context(), "x/y/z/1"); err != nil {
		t.Fatal(err)
	}
	if fs := files(t, dir); !slices.Equal(fs, []string{"x", "x/y", "x/y/2"}) {
		t.Fatalf("files after first delete = %q", fs)
	}
	if err := s.Delete(t.Context(), "x/y/2"); err != nil {
		t.Fatal(err)
	}
	if fs := files(t, dir); len(fs) != 0 {
		t.Fatalf("files after deleting everything = %q, want none", fs)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("store root removed: %v", err)
	}
}

func TestLocalNameConflicts(t *testing.T) {
	s, _ := newLocal(t)
	if err := s.Put(t.Context(), "f", []byte("file")); err != nil {
		t.Fatal(err)
	}
	// A local directory cannot hold "f" both as a file and as a directory.
	if err := s.Put(t.Context(), "f/g", []byte("x")); err == nil {
		t.Fatal("Put under an object's name succeeded")
	}
	if err := s.Put(t.Context(), "d/e", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(t.Context(), "d", []byte("x")); err == nil {
		t.Fatal("Put over a directory of objects succeeded")
	}
	got, err := s.Get(t.Context(), "d/e")
	if err != nil || string(got) != "x" {
		t.Fatalf("Get(d/e) after failed Put(d) = %q, %v", got, err)
	}
}

func TestNewLocalErrors(t *testing.T) {
	if _, err := blob.NewLocal(""); err == nil {
		t.Error("NewLocal(\"\") succeeded")
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := blob.NewLocal(file); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("NewLocal(file) = %v, want a not-a-directory error", err)
	}
	// A relative path is resolved once, at open.
	t.Chdir(t.TempDir())
	s, err := blob.NewLocal("rel")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(t.Context(), "o", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join("rel", "o")); err != nil {
		t.Errorf("object of a relative store: %v", err)
	}
}
