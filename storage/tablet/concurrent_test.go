package tablet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/sstable"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

const concColumns = 4

// checkWhole fails unless the newest version of every column of row (read
// with MaxVersions 1) carries the value of one row mutation: the mutation
// wrote every column of both families at once.
func checkWhole(r cell.Row) error {
	if len(r.Cells) != 2*concColumns {
		return fmt.Errorf("row %s has %d cells, want 0 or %d: %s", r.Key, len(r.Cells), 2*concColumns, cellsString(r.Cells))
	}
	for _, c := range r.Cells[1:] {
		if !bytes.Equal(c.Value, r.Cells[0].Value) {
			return fmt.Errorf("row %s is half applied: %s", r.Key, cellsString(r.Cells))
		}
	}
	return nil
}

// TestConcurrentWritesAreAtomic runs writers, readers, scanners and
// compactions at once (run it with -race): every read sees each row
// mutation whole or not at all, and every acknowledged write is readable.
func TestConcurrentWritesAreAtomic(t *testing.T) {
	ctx := context.Background()
	store := blob.NewMemory()
	logDir := t.TempDir()
	log, err := commitlog.Open(ctx, commitlog.Options{Dir: logDir})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	sc, err := NewScanCache(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	opts := Options{
		ID: "conc", Store: store, Dir: "sst", Log: log, LogOptions: commitlog.Options{Dir: logDir},
		StateStore: NewBlobStateStore(store, "state"), Cache: sstable.NewCache(1 << 20), ScanCache: sc,
		MemtableBytes: 16 << 10, MaxSSTables: 3,
		Schema: tabletdesc.Schema{
			Families: map[string]tabletdesc.Family{"a": {}, "b": {LocalityGroup: "mem"}},
			LocalityGroups: map[string]tabletdesc.LocalityGroup{
				"default": {BlockSize: 512},
				"mem":     {InMemory: true, BlockSize: 512},
			},
		},
	}
	tb, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	duration := time.Second
	if os.Getenv("TABULA_LONG") != "" {
		duration = 20 * time.Second
	}
	const writers, rows = 4, 50
	deadline := time.Now().Add(duration)
	var stop atomic.Bool
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	report := func(err error) {
		select {
		case errc <- err:
		default:
		}
		stop.Store(true)
	}
	// Last acknowledged value per row, per writer (writer w owns rows
	// with row%writers == w, so its acks are ordered per row).
	var acked sync.Map
	var writes atomic.Int64
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for n := 0; !stop.Load() && time.Now().Before(deadline); n++ {
				row := fmt.Appendf(nil, "row%03d", r.IntN(rows/writers)*writers+w)
				val := fmt.Appendf(nil, "w%d-%d", w, n)
				rm := cell.RowMutation{Row: row}
				if r.IntN(4) == 0 {
					rm.Mutations = append(rm.Mutations, cell.DeleteRow())
				}
				for c := range concColumns {
					for _, f := range []string{"a", "b"} {
						rm.Mutations = append(rm.Mutations, cell.Set(f, fmt.Appendf(nil, "c%d", c), cell.ServerTimestamp, val))
					}
				}
				if err := tb.Apply(ctx, rm); err != nil {
					report(fmt.Errorf("apply: %w", err))
					return
				}
				acked.Store(string(row), string(val))
				writes.Add(1)
			}
		}()
	}
	var reads atomic.Int64
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i), 2))
			for !stop.Load() && time.Now().Before(deadline) {
				row := fmt.Appendf(nil, "row%03d", r.IntN(rows))
				want, wantOK := acked.Load(string(row))
				got, ok, err := tb.ReadRow(ctx, row, ReadOptions{MaxVersions: 1})
				if err != nil {
					report(err)
					return
				}
				if !ok {
					if wantOK {
						report(fmt.Errorf("row %s missing after an acknowledged write", row))
					}
					continue
				}
				if err := checkWhole(got); err != nil {
					report(err)
					return
				}
				_ = want
				reads.Add(1)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load() && time.Now().Before(deadline); i++ {
			err := tb.Scan(ctx, ScanOptions{Reverse: i%2 == 1, ReadOptions: ReadOptions{MaxVersions: 1}}, func(r cell.Row) error {
				return checkWhole(r)
			})
			if err != nil {
				report(fmt.Errorf("scan: %w", err))
				return
			}
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load() && time.Now().Before(deadline); i++ {
			var err error
			switch i % 3 {
			case 0:
				err = tb.Flush(ctx)
			case 1:
				err = tb.Compact(ctx, false)
			case 2:
				err = tb.Compact(ctx, true)
			}
			if err != nil {
				report(fmt.Errorf("compaction: %w", err))
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	// Every row's newest value is the last acknowledged one, also after
	// a reopen.
	check := func(tb *Tablet) {
		acked.Range(func(k, v any) bool {
			got, ok, err := tb.ReadRow(ctx, []byte(k.(string)), ReadOptions{MaxVersions: 1})
			if err != nil || !ok || string(got.Cells[0].Value) != v.(string) {
				t.Fatalf("row %s: got %v %s (%v), want %s", k, ok, cellsString(got.Cells), err, v)
			}
			return true
		})
	}
	check(tb)
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	tb, err = Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	check(tb)
	st := tb.Stats()
	t.Logf("%d writes, %d reads; stats %+v", writes.Load(), reads.Load(), st)
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestErrors checks the typed errors of the API.
func TestErrors(t *testing.T) {
	ctx := context.Background()
	store := blob.NewMemory()
	opts := Options{ID: "e", Start: []byte("b"), End: []byte("m"), Store: store, StateStore: NewBlobStateStore(store, "state"),
		Schema: tabletdesc.Schema{Families: map[string]tabletdesc.Family{"f": {}}}}
	tb, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.abandon()
	err = tb.Apply(ctx, cell.RowMutation{Row: []byte("c"), Mutations: []cell.Mutation{cell.Set("f", nil, 1, nil), cell.Set("g", nil, 1, nil)}})
	var fe *FamilyNotFoundError
	if !errors.As(err, &fe) || fe.Family != "g" || !errors.Is(err, ErrFamilyNotFound) {
		t.Fatalf("unknown family: %v", err)
	}
	if _, ok, _ := tb.ReadRow(ctx, []byte("c"), ReadOptions{}); ok {
		t.Fatal("part of an invalid mutation was applied")
	}
	for _, row := range []string{"a", "m", "z"} {
		err := tb.Apply(ctx, cell.RowMutation{Row: []byte(row), Mutations: []cell.Mutation{cell.Set("f", nil, 1, nil)}})
		if !errors.Is(err, tabletdesc.ErrNotServing) {
			t.Fatalf("row %s outside [b, m): %v", row, err)
		}
	}
	err = tb.Apply(ctx, cell.RowMutation{Row: []byte("c")})
	if !errors.Is(err, cell.ErrInvalidArgument) {
		t.Fatalf("empty mutation: %v", err)
	}
	if err := tb.SetSchema(ctx, tabletdesc.Schema{Families: map[string]tabletdesc.Family{"f": {LocalityGroup: "other"}}}); err == nil {
		t.Fatal("a family moved between locality groups")
	}
}
