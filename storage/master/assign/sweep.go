package assign

import (
	"slices"
	"strings"
	"time"

	"github.com/tabuladb/tabula/storage/tablet"
)

// TabletFiles is the SSTables one live tablet's state references.
type TabletFiles struct {
	Tablet TabletID
	Files  []string
}

// StoredFile is an object the store lists.
type StoredFile struct {
	Name string
	// Modified is the store's time for the object; zero if unknown. The
	// later of it and the time in the name counts as the creation time.
	Modified time.Time
}

// SweepInput is what a sweep of unreferenced files observed.
type SweepInput struct {
	// Referenced must cover every live tablet (split parents excluded,
	// their children reference what they share); a tablet left out loses
	// its files.
	Referenced []TabletFiles
	// Listed is the store's listing, taken after Referenced was read, so
	// that a file committed in between is either referenced or young.
	Listed []StoredFile
	// InProgress holds the names that compactions and splits under way may
	// still commit.
	InProgress []string
	// Grace spares files created less than Grace before Now: a compaction
	// may be writing a file whose name nobody has reported.
	Grace time.Duration
	Now   time.Time
}

// PlanSweep is the one policy for deleting SSTables, used wherever files
// are swept (the cluster master's rounds, `tabula dev`'s, a dropped
// table's files). It returns, sorted, the listed SSTables safe to delete: those no
// tablet references, not in progress, whose name a tablet made (see
// tablet.FileCreated) and created at least Grace before Now. It never
// returns a referenced or in-progress name, a file younger than the grace
// (or dated in the future), or a name of another shape (logs, catalog
// objects, files of an unknown writer). Pure: the caller deletes.
func PlanSweep(in SweepInput) []string {
	keep := make(map[string]bool)
	for _, tf := range in.Referenced {
		for _, f := range tf.Files {
			keep[f] = true
		}
	}
	for _, f := range in.InProgress {
		keep[f] = true
	}
	var out []string
	for _, f := range in.Listed {
		if keep[f.Name] || !strings.HasSuffix(f.Name, ".sst") {
			continue
		}
		created, ok := tablet.FileCreated(f.Name)
		if !ok {
			continue
		}
		if f.Modified.After(created) {
			created = f.Modified
		}
		if in.Now.Sub(created) < in.Grace || created.After(in.Now) {
			continue
		}
		out = append(out, f.Name)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
