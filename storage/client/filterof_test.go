package client

import (
	"testing"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/protobuf/proto"
)

// TestFilterOfChainsTheCallersFilter checks that ScanOptions.Filter is
// applied alone when it is the only selection, and chained last after
// the other selections otherwise.
func TestFilterOfChainsTheCallersFilter(t *testing.T) {
	user := &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_ValueRegexFilter{ValueRegexFilter: []byte("x.*")}}
	if got := FilterOf(ScanOptions{Filter: user}); !proto.Equal(got, user) {
		t.Fatalf("FilterOf(Filter only) = %v, want %v", got, user)
	}
	got := FilterOf(ScanOptions{Families: []string{"f"}, Filter: user})
	chain := got.GetChain().GetFilters()
	if len(chain) != 2 || chain[0].GetFamilyNameRegexFilter() != "f" || !proto.Equal(chain[1], user) {
		t.Fatalf("FilterOf(Families, Filter) = %v, want a chain of the family filter then %v", got, user)
	}
}
