package tablet

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// slowSSTStore delays the Close of its first slow SSTable writers by
// delay: the files are written more slowly than a commit window.
type slowSSTStore struct {
	blob.Store
	slow    atomic.Int32
	delay   time.Duration
	created atomic.Int32
	mu      sync.Mutex
	slowOne []string // the names written slowly
}

func (s *slowSSTStore) Create(ctx context.Context, name string) (blob.Writer, error) {
	w, err := s.Store.Create(ctx, name)
	if err != nil || !strings.HasSuffix(name, sstSuffix) {
		return w, err
	}
	s.created.Add(1)
	if s.slow.Add(-1) >= 0 {
		s.mu.Lock()
		s.slowOne = append(s.slowOne, name)
		s.mu.Unlock()
		return slowCloser{w, s.delay}, nil
	}
	return w, nil
}

type slowCloser struct {
	blob.Writer
	delay time.Duration
}

func (w slowCloser) Close() error {
	time.Sleep(w.delay)
	return w.Writer.Close()
}

// TestFileCommitWindow: a flush or compaction whose SSTable took longer to
// write than Options.FileCommitWindow (so that a sweep may already have
// deleted it as an old unreferenced file) writes it again under a fresh
// name and commits only that one; one that stays slow fails and commits
// nothing, and the next Flush writes both the memtable it left frozen and
// the active one.
func TestFileCommitWindow(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		slow     int32
		wantErr  bool
		minFiles int32
	}{
		{"one slow write", 1, false, 2},
		{"always slow", 100, true, commitAttempts},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := &slowSSTStore{Store: blob.NewMemory(), delay: 60 * time.Millisecond}
			logDir := t.TempDir()
			log, err := commitlog.Open(ctx, commitlog.Options{Dir: logDir})
			if err != nil {
				t.Fatal(err)
			}
			defer log.Close()
			tb, err := Open(ctx, Options{ID: "p", Store: store, Dir: "sst", Log: log, LogOptions: commitlog.Options{Dir: logDir},
				StateStore: NewBlobStateStore(store, "state"), Schema: tabletdesc.Schema{Families: map[string]tabletdesc.Family{"f": {}}},
				FileCommitWindow: 30 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer tb.Close()
			if err := tb.Apply(ctx, cell.RowMutation{Row: []byte("r"), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1000, []byte("v"))}}); err != nil {
				t.Fatal(err)
			}
			store.slow.Store(tc.slow)
			err = tb.Flush(ctx)
			if got := store.created.Load(); got < tc.minFiles {
				t.Fatalf("%d SSTables written, want at least %d", got, tc.minFiles)
			}
			st := tb.State()
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), "commit window") {
					t.Fatalf("Flush with every write slow: %v, want an error naming the commit window", err)
				}
				if len(st.Files()) != 0 {
					t.Fatalf("a failed flush committed %v", st.Files())
				}
				// The failed flush left its memtable frozen; the next
				// Flush writes it and then the active one, which holds
				// a write acknowledged before the call.
				store.slow.Store(0)
				if err := tb.Apply(ctx, cell.RowMutation{Row: []byte("s"), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1000, []byte("w"))}}); err != nil {
					t.Fatal(err)
				}
				if err := tb.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				if fs := tb.State().Files(); len(fs) != 2 {
					t.Fatalf("after a flush following a failed one the files are %v, want two (the frozen memtable's and the active one's)", fs)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			files := st.Files()
			if len(files) != 1 {
				t.Fatalf("state files %v, want one", files)
			}
			// The committed file is the rewrite, not the slow one.
			if slices.Contains(store.slowOne, files[0]) {
				t.Fatalf("the flush committed %s, the file written slowly", files[0])
			}
			// A merging compaction with a slow write does the same.
			if err := tb.Apply(ctx, cell.RowMutation{Row: []byte("s"), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1000, []byte("w"))}}); err != nil {
				t.Fatal(err)
			}
			if err := tb.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			before := store.created.Load()
			store.slow.Store(1)
			if err := tb.Compact(ctx, false); err != nil {
				t.Fatal(err)
			}
			if got := store.created.Load() - before; got != 2 {
				t.Fatalf("the compaction wrote %d SSTables, want 2 (the slow one again)", got)
			}
			if fs := tb.State().Files(); len(fs) != 1 || slices.Contains(store.slowOne, fs[0]) {
				t.Fatalf("after the compaction the files are %v, want one written fast (slow ones: %v)", fs, store.slowOne)
			}
		})
	}
}
