package assign

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/tablet"
)

// sst names an SSTable as a tablet does: creation time in µs, 16 hex
// digits, then a random part.
func sst(dir string, created time.Time, n int) string {
	return fmt.Sprintf("%s/%016x-%016x.sst", dir, created.UnixMicro(), n)
}

func TestPlanSweep(t *testing.T) {
	now := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	old, young := now.Add(-time.Hour), now.Add(-time.Minute)
	grace := 10 * time.Minute
	var (
		live     = sst("t/u1", old, 1)
		dead     = sst("t/u1", old, 2)
		fresh    = sst("t/u1", young, 3)
		pending  = sst("t/u2", old, 4)
		future   = sst("t/u2", now.Add(time.Hour), 5)
		shared   = sst("t/u0", old, 6) // a split parent's file, referenced by a child
		touched  = sst("t/u2", old, 7) // old name, recently rewritten by the store
		foreign  = "t/u1/notes.sst"
		log      = "logs/s1/000001.log"
		orphans  = []string{dead}
		listings = []StoredFile{{Name: live}, {Name: dead}, {Name: fresh}, {Name: pending}, {Name: future},
			{Name: shared}, {Name: touched, Modified: young}, {Name: foreign}, {Name: log}, {Name: dead}}
	)
	in := SweepInput{
		Referenced: []TabletFiles{{"u1", []string{live}}, {"u3", []string{shared}}, {"u4", []string{shared}}},
		Listed:     listings,
		InProgress: []string{pending},
		Grace:      grace,
		Now:        now,
	}
	if got := PlanSweep(in); !slices.Equal(got, orphans) {
		t.Fatalf("PlanSweep = %v, want %v", got, orphans)
	}
	// Past the grace the young file goes too; the referenced ones never do.
	in.Now = now.Add(time.Hour)
	in.InProgress = nil
	want := []string{dead, fresh, pending, touched}
	slices.Sort(want)
	if got := PlanSweep(in); !slices.Equal(got, want) {
		t.Fatalf("later: PlanSweep = %v, want %v", got, want)
	}
	// Nothing listed, nothing to delete.
	if got := PlanSweep(SweepInput{Now: now}); len(got) != 0 {
		t.Fatalf("empty: %v", got)
	}
}

// TestPlanSweepRandom: over random listings, PlanSweep never returns a
// referenced, in-progress or young file, and returns every other old
// tablet-made SSTable.
func TestPlanSweepRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	now := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	for trial := 0; trial < 500; trial++ {
		grace := time.Duration(rng.IntN(120)) * time.Minute
		var in SweepInput
		in.Now, in.Grace = now, grace
		refs := make(map[string]bool)
		inProg := make(map[string]bool)
		for i := 0; i < 40; i++ {
			name := sst(fmt.Sprintf("t/u%d", rng.IntN(5)), now.Add(-time.Duration(rng.IntN(240))*time.Minute), i)
			in.Listed = append(in.Listed, StoredFile{Name: name})
			switch rng.IntN(4) {
			case 0:
				refs[name] = true
				in.Referenced = append(in.Referenced, TabletFiles{TabletID(fmt.Sprint("u", rng.IntN(5))), []string{name}})
			case 1:
				inProg[name] = true
				in.InProgress = append(in.InProgress, name)
			}
		}
		got := PlanSweep(in)
		del := make(map[string]bool)
		for _, n := range got {
			del[n] = true
		}
		for _, f := range in.Listed {
			young := false
			if c, ok := tablet.FileCreated(f.Name); ok {
				young = now.Sub(c) < grace
			}
			wantDel := !refs[f.Name] && !inProg[f.Name] && !young
			if del[f.Name] != wantDel {
				t.Fatalf("trial %d: %s deleted=%v, want %v (ref %v, in progress %v, young %v)",
					trial, f.Name, del[f.Name], wantDel, refs[f.Name], inProg[f.Name], young)
			}
		}
	}
}
