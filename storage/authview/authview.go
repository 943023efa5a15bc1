// Package authview enforces Cloud Bigtable's authorized views on the data
// API. Server wraps a google.bigtable.v2.Bigtable server (tabula dev's
// DataService, a cluster tablet server's Gateway): a request that names an
// authorized_view_name instead of a table_name is checked and rewritten
// into a request on the view's table that can neither see nor change
// anything outside the view, and passed on.
//
//   - ReadRows: the row set is intersected with the view's row prefixes
//     (nothing left: no rows), and the filter becomes the chain of the
//     view's columns (an interleave of column ranges) and the request's
//     own filter, so the request's filter, limits and conditions only
//     ever see the view's cells.
//   - SampleRowKeys: only the samples that bound a part of the table
//     overlapping the view are returned.
//   - MutateRow, CheckAndMutateRow, ReadModifyWriteRow: a row outside the
//     view, or a mutation or rule on a column outside it, is
//     PERMISSION_DENIED naming the field, and nothing is applied;
//     DeleteFromFamily needs the whole family in the view, DeleteFromRow
//     every family of the table. A condition's predicate sees only the
//     view's cells.
//   - MutateRows: each entry is checked alone; an entry outside the view
//     gets PERMISSION_DENIED in the response, the others are applied.
//
// A view is read from the table's catalog entry (meta.Table.AuthorizedViews)
// and cached for CacheTTL, so a changed or deleted view takes effect within
// that time.
package authview
