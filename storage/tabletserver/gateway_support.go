package tabletserver

import (
	"context"
	"log/slog"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"

	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// What the cluster's gateway (storage/gateway) asks of the DataService it
// serves local requests with, beyond the data API itself.

// ServesTablet reports whether tablet id of table is open on this server's
// Host, for a Host in partial (cluster) mode: a gateway serves that
// tablet's requests here whatever its location cache says. A full Host
// (tabula dev, which has no gateway) answers false.
func (s *DataService) ServesTablet(table meta.TableID, id string) bool {
	return s.host.opts.Partial && s.host.servesTablet(table, id)
}

// CoversRanges reports whether the tablets open on this server's partial
// Host hold every row of ranges (ascending, as RowRanges returns them): a
// client that found the owner itself sent the request. A full Host answers
// false.
func (s *DataService) CoversRanges(table meta.TableID, ranges []tabletdesc.KeyRange) bool {
	return s.host.opts.Partial && s.host.coversRanges(table, ranges)
}

// CheckMutateRowsEntries checks a MutateRows request's request-wide
// limits — at least one entry, at most HostOptions.Limits.MaxMutations
// mutations over all entries — as MutateRows does, with the same
// INVALID_ARGUMENT naming the field: a gateway checks them before it
// splits the request by owner.
func (s *DataService) CheckMutateRowsEntries(entries []*bigtablepb.MutateRowsRequest_Entry) error {
	return checkEntries(entries, s.host.opts.Limits.MaxMutations)
}

// Logger returns the service's logger.
func (s *DataService) Logger() *slog.Logger { return s.log }

// FlushTable writes the memtables of table's open tablets to SSTables
// (a minor compaction of each), waiting for them. A table not open here is
// ErrTableNotFound.
func (h *Host) FlushTable(ctx context.Context, table meta.TableID) error {
	st, err := h.table(table)
	if err != nil {
		return err
	}
	for _, tb := range st.list() {
		if err := tb.Flush(ctx); err != nil {
			return err
		}
	}
	return nil
}
