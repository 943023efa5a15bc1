package tabletserver

import (
	"strings"
	"testing"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"

	"github.com/tabuladb/tabula/storage/filter"
)

func TestFilterCache(t *testing.T) {
	fc := newFilterCache()
	compiles := 0
	compile := func(f *bigtablepb.RowFilter, field string) (*filter.Filter, error) {
		return fc.compile(f, field, func() (*filter.Filter, error) {
			compiles++
			return filter.Compile(f, filter.Limits{}, filter.WithField(field))
		})
	}
	fam := func() *bigtablepb.RowFilter {
		return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_FamilyNameRegexFilter{FamilyNameRegexFilter: "^f$"}}
	}
	a, err := compile(fam(), "filter")
	if err != nil {
		t.Fatal(err)
	}
	b, err := compile(fam(), "filter") // an equal filter in a new message
	if err != nil || a != b || compiles != 1 {
		t.Fatalf("equal filters: same compiled filter %v, %d compiles, err %v", a == b, compiles, err)
	}
	if c, _ := compile(fam(), "predicate_filter"); c == a || compiles != 2 {
		t.Fatalf("a filter under another field path shares the entry (%d compiles)", compiles)
	}
	bad := &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_ValueRegexFilter{ValueRegexFilter: []byte("(")}}
	for i := 0; i < 2; i++ {
		if _, err := compile(bad, "predicate_filter"); err == nil || !strings.Contains(err.Error(), "predicate_filter") {
			t.Fatalf("bad filter: %v", err)
		}
	}
	if compiles != 4 {
		t.Fatalf("failed compilations were cached: %d compiles, want 4", compiles)
	}
}
