package tabletserver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// TestMetadataSplits: with a small MetadataSplitBytes the background
// splitter splits a METADATA tablet that grew past it — between two of
// its rows, reported through OnSplit like a user tablet's split — and
// never the root tablet, however large; user tablets keep their own
// (larger) split size. A forced split of a METADATA tablet at a given
// key is refused.
func TestMetadataSplits(t *testing.T) {
	type report struct {
		table    meta.TableID
		parent   string
		children []TabletInfo
	}
	var mu sync.Mutex
	var reports []report
	h, _ := newPartialHost(t, blob.NewMemory(), false, func(o *HostOptions) {
		o.MetadataSplitBytes = 2 << 10
		o.SplitBytes = 1 << 30
		o.OnSplit = func(ctx context.Context, table meta.TableID, parent string, children []TabletInfo) error {
			mu.Lock()
			defer mu.Unlock()
			reports = append(reports, report{table, parent, children})
			return nil
		}
	})
	mt := meta.Table{ID: meta.MetadataTable, Families: map[string]tabletdesc.Family{"f": {}}, Tablets: []meta.TabletRef{
		{ID: meta.RootTabletID, End: []byte("m")},
		{ID: "meta-1", Start: []byte("m")},
	}}
	loadAll(t, h, mt, ReplayLog{}, 0, 1)
	user := partialTable("u")
	loadAll(t, h, user, ReplayLog{}, 0)
	var metaRows []string
	for i := range 60 {
		for _, row := range []string{fmt.Sprintf("a%03d", i), fmt.Sprintf("m%03d", i)} {
			if err := putRow(h, meta.MetadataTable, row); err != nil {
				t.Fatal(err)
			}
		}
		metaRows = append(metaRows, fmt.Sprintf("m%03d", i))
		if err := putRow(h, user.ID, fmt.Sprintf("b%03d", i)); err != nil {
			t.Fatal(err)
		}
	}
	// The splitter's pass, as the background loop runs it (which the
	// writes may have kicked too).
	h.splitBig(context.Background())
	h.splitBig(context.Background())
	served := h.ServedTablets()
	var root, users, metas int
	for _, s := range served {
		switch {
		case s.ID == meta.RootTabletID:
			root++
		case s.Table == meta.MetadataTable:
			metas++
		default:
			users++
		}
	}
	if root != 1 || users != 1 || metas < 2 {
		t.Fatalf("serving %s: want the root and the user tablet whole, METADATA's other tablet split", servedIDs(h))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reports) == 0 {
		t.Fatal("no split reported")
	}
	for _, r := range reports {
		if r.table != meta.MetadataTable {
			t.Errorf("split of %s tablet %s: only METADATA is past its split size", r.table, r.parent)
			continue
		}
		if r.parent == meta.RootTabletID {
			t.Errorf("the root tablet split: %+v", r.children)
		}
		if len(r.children) != 2 {
			t.Fatalf("split of %s into %d", r.parent, len(r.children))
		}
		key := r.children[0].End
		// Between rows: the key is a row followed by 0x00.
		if n := len(key); n < 2 || key[n-1] != 0 || !containsString(metaRows, string(key[:n-1])) {
			t.Errorf("split of %s at %q: want one of its rows followed by 0x00", r.parent, key)
		}
	}
}

// TestMetadataForcedSplit: the root tablet never splits, and a METADATA
// tablet refuses a split key given from outside; both change nothing.
func TestMetadataForcedSplit(t *testing.T) {
	ctx := context.Background()
	h, _ := newPartialHost(t, blob.NewMemory(), false, nil)
	mt := meta.Table{ID: meta.MetadataTable, Families: map[string]tabletdesc.Family{"f": {}}, Tablets: []meta.TabletRef{
		{ID: meta.RootTabletID, End: []byte("m")},
		{ID: "meta-1", Start: []byte("m")},
	}}
	loadAll(t, h, mt, ReplayLog{}, 0, 1)
	for _, row := range []string{"a", "b", "c", "m1", "m2", "m3"} {
		if err := putRow(h, meta.MetadataTable, row); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.SplitTabletAt(ctx, meta.MetadataTable, meta.RootTabletID, nil); !errors.Is(err, tablet.ErrCannotSplit) {
		t.Errorf("splitting the root tablet: %v, want ErrCannotSplit", err)
	}
	if _, err := h.SplitTabletAt(ctx, meta.MetadataTable, "meta-1", []byte("m2")); !errors.Is(err, tablet.ErrCannotSplit) {
		t.Errorf("splitting a METADATA tablet at a given key: %v, want ErrCannotSplit", err)
	}
	if got, want := servedIDs(h), meta.RootTabletID+" meta-1"; got != want {
		t.Fatalf("serving %q after refused splits, want %q", got, want)
	}
	children, err := h.SplitTabletAt(ctx, meta.MetadataTable, "meta-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(children[0].End); got != "m1\x00" && got != "m2\x00" {
		t.Errorf("METADATA split at %q, want between two rows", got)
	}
	for _, row := range []string{"a", "m1", "m2", "m3"} {
		getRow(t, h, meta.MetadataTable, row)
	}
}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// TestMetadataTabletsReleaseLog: while the server takes user writes, its
// METADATA tablets — the root with a write in memory, another idle one —
// move their redo points up to the log's tail every MetadataLogRelease
// (the root flushed, the idle one by a state save), so that a recovery
// of the root from this server's unsorted log reads only its tail; user
// tablets keep theirs (LogFlushSegments is far off). With the release
// off (negative), nothing moves.
func TestMetadataTabletsReleaseLog(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("release=%v", on), func(t *testing.T) {
			h, _ := newPartialHost(t, blob.NewMemory(), false, func(o *HostOptions) {
				o.MetadataLogRelease = 20 * time.Millisecond
				if !on {
					o.MetadataLogRelease = -1
				}
			})
			mt := meta.Table{ID: meta.MetadataTable, Families: map[string]tabletdesc.Family{"f": {}}, Tablets: []meta.TabletRef{
				{ID: meta.RootTabletID, End: []byte("m")},
				{ID: "meta-1", Start: []byte("m")},
			}}
			loadAll(t, h, mt, ReplayLog{}, 0, 1)
			user := partialTable("u")
			loadAll(t, h, user, ReplayLog{}, 0, 1, 2)
			if err := putRow(h, meta.MetadataTable, "a-root-row"); err != nil {
				t.Fatal(err)
			}
			redo := func(id meta.TableID) map[string]tabletdesc.LogPosition {
				st, err := h.table(id)
				if err != nil {
					t.Fatal(err)
				}
				out := map[string]tabletdesc.LogPosition{}
				for _, tb := range st.list() {
					out[tb.ID()] = tb.State().RedoPoint
				}
				return out
			}
			userBefore := redo(user.ID)
			var mark tabletdesc.LogPosition // the tail after some user writes
			caughtUp := func() bool {
				for _, p := range redo(meta.MetadataTable) {
					if p.Compare(mark) < 0 {
						return false
					}
				}
				return true
			}
			// Off, 300 ms would be 15 releases.
			deadline := time.Now().Add(map[bool]time.Duration{true: 3 * time.Second, false: 300 * time.Millisecond}[on])
			for i := 0; ; i++ {
				if err := putRow(h, user.ID, fmt.Sprintf("b%05d", i)); err != nil {
					t.Fatal(err)
				}
				if i == 20 {
					mark = h.opts.Log.Tail()
				}
				if i > 20 && caughtUp() || time.Now().After(deadline) {
					break
				}
				time.Sleep(2 * time.Millisecond)
			}
			released := counterValue(t, h.metrics.metaReleases)
			if !on {
				if caughtUp() || released != 0 {
					t.Fatalf("release off: METADATA redo points %v reached the tail %v (%v releases)", redo(meta.MetadataTable), mark, released)
				}
				return
			}
			if !caughtUp() {
				t.Fatalf("METADATA redo points %v still before %v after 3 s of user writes", redo(meta.MetadataTable), mark)
			}
			if released < 2 {
				t.Fatalf("tabula_commitlog_metadata_releases_total %v, want at least 2", released)
			}
			for id, p := range redo(user.ID) {
				if p != userBefore[id] {
					t.Fatalf("user tablet %s's redo point moved from %v to %v", id, userBefore[id], p)
				}
			}
			getRow(t, h, meta.MetadataTable, "a-root-row")
		})
	}
}
