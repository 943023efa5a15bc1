package tabletserver

import (
	"context"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/pacing"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// TestIdleMerge: a Host whose server has served nothing for
// IdleMergeAfter has its tablets merge the SSTables that piled up; while
// a request is in flight, they stay.
func TestIdleMerge(t *testing.T) {
	for _, tc := range []struct {
		name      string
		busy      bool
		wantFiles int
	}{{"idle", false, 1}, {"busy", true, 3}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			logOpts := commitlog.Options{Dir: t.TempDir()}
			lg, err := commitlog.Open(ctx, logOpts)
			if err != nil {
				t.Fatal(err)
			}
			defer lg.Close()
			p := pacing.New(pacing.Config{Quiet: time.Millisecond})
			if tc.busy {
				p.Begin() // a request in flight throughout
				defer p.End()
			}
			h, err := NewHost(ctx, HostOptions{Store: blob.NewMemory(), Log: lg, LogOptions: logOpts, Logger: quietLogger(),
				Pacer: p, IdleMergeAfter: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			tm := meta.Table{ID: meta.TableID{Instance: "i", Table: "t"}, Families: map[string]tabletdesc.Family{"f": {}},
				Tablets: []meta.TabletRef{{ID: "t-0"}}}
			if err := h.OpenTable(ctx, tm); err != nil {
				t.Fatal(err)
			}
			ds := NewDataService(h, DataOptions{})
			for round := range 3 {
				for i := range 20 {
					_, err := ds.MutateRow(ctx, &bigtablepb.MutateRowRequest{TableName: tm.ID.FullName("p"), RowKey: fmt.Appendf(nil, "r%02d", i),
						Mutations: []*bigtablepb.Mutation{{Mutation: &bigtablepb.Mutation_SetCell_{SetCell: &bigtablepb.Mutation_SetCell{
							FamilyName: "f", ColumnQualifier: []byte("q"), TimestampMicros: int64(round+1) * 1000, Value: []byte("v")}}}}})
					if err != nil {
						t.Fatal(err)
					}
				}
				if err := h.FlushTable(ctx, tm.ID); err != nil {
					t.Fatal(err)
				}
			}
			files := func() int {
				tabs := h.TableTablets(tm.ID)
				if len(tabs) != 1 {
					t.Fatalf("%d tablets, want 1", len(tabs))
				}
				n := 0
				for _, g := range tabs[0].Stats.Groups {
					n += g.SSTables
				}
				return n
			}
			// Well past IdleMergeAfter and its ticks.
			deadline := time.Now().Add(500 * time.Millisecond)
			for files() != tc.wantFiles && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(100 * time.Millisecond)
			if n := files(); n != tc.wantFiles {
				t.Fatalf("%d SSTables, want %d", n, tc.wantFiles)
			}
		})
	}
}
