package tabletserver

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
	"github.com/tabuladb/tabula/storage/tabletserver/tabletpb"
)

// toStatus maps an error of the storage layers to the gRPC status Cloud
// Bigtable would return. Errors that carry a status (filter errors, errors
// made here) keep it.
func toStatus(err error) error { return (*Host)(nil).toStatus(err) }

// toStatus is toStatus with the Host that served the request (nil: none),
// which fills the table and the tablet's range of a not-serving detail.
func (h *Host) toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var code codes.Code
	switch {
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, cell.ErrInvalidArgument), errors.Is(err, meta.ErrBadName):
		code = codes.InvalidArgument
	case errors.Is(err, ErrTableNotFound), errors.Is(err, tablet.ErrFamilyNotFound):
		code = codes.NotFound
	case errors.Is(err, tabletdesc.ErrNotServing):
		// The internal retries are exhausted: the client's location
		// cache (or the master) must catch up.
		return h.notServingStatus(err)
	case errors.Is(err, tablet.ErrFailed), errors.Is(err, commitlog.ErrFailed), errors.Is(err, commitlog.ErrClosed):
		code = codes.Unavailable
	case errors.Is(err, commitlog.ErrRecordTooLarge):
		code = codes.InvalidArgument
	default:
		code = codes.Internal
	}
	return status.Error(code, err.Error())
}

// notServingStatus returns the FAILED_PRECONDITION of an error matching
// tabletdesc.ErrNotServing, with a tabletpb.NotServing detail holding what
// the error and the Host's routing (if any) know.
func (h *Host) notServingStatus(err error) error {
	if h == nil {
		return tabletpb.NotServingStatus(err, nil)
	}
	return tabletpb.NotServingStatus(err, h.describeNotServing)
}

// describeNotServing fills the table and the tablet's range of d, finding
// tablet d.TabletId in the routing of the served tables (a tablet that
// refused a request is usually still there: the routing is what sent the
// request to it). withTablet names the table itself ("instance/table") when
// no tablet holds the row: then only the table is filled and the tablet ID
// cleared.
func (h *Host) describeNotServing(d *tabletpb.NotServing) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for id, st := range h.tables {
		if d.TabletId == id.String() {
			d.TableName = id.FullName("-")
			d.TabletId = ""
			return
		}
		rt := st.routes.Load()
		if rt == nil {
			continue
		}
		for _, tb := range rt.tabs {
			if tb.ID() == d.TabletId {
				d.TableName = id.FullName("-")
				r := tb.Range()
				d.TabletStart, d.TabletEnd = r.Start, r.End
				return
			}
		}
	}
}

// invalidf returns an INVALID_ARGUMENT status naming a request field.
func invalidf(field, format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, "%s: %s", field, fmt.Sprintf(format, args...))
}

// prefixField puts a request path in front of the field an error names,
// for errors about one entry of a batch: "entries[3].mutations[0]...".
func prefixField(prefix string, err error) error {
	var ie *cell.InvalidArgumentError
	if errors.As(err, &ie) {
		return &cell.InvalidArgumentError{Field: prefix + "." + ie.Field, Reason: ie.Reason}
	}
	var fe *tablet.FamilyNotFoundError
	if errors.As(err, &fe) && fe.Field != "" {
		return &tablet.FamilyNotFoundError{Family: fe.Family, Field: prefix + "." + fe.Field}
	}
	return err
}

// convertMutations converts the wire mutations of one row to the engine's,
// checking what only the server knows: the table's timestamp granularity.
// Limits and families are checked by the tablet. field names the list in
// the request ("mutations", "true_mutations").
func convertMutations(field string, t meta.Table, in []*bigtablepb.Mutation) ([]cell.Mutation, error) {
	return appendMutations(make([]cell.Mutation, 0, len(in)), field, t, in)
}

// appendMutations is convertMutations appending to out: a bulk write
// converts all its rows' mutations into one slice.
func appendMutations(out []cell.Mutation, field string, t meta.Table, in []*bigtablepb.Mutation) ([]cell.Mutation, error) {
	millis := t.Granularity == meta.GranularityMillis
	for i, m := range in {
		// The field's name, built only for an error (or an
		// aggregate): formatting it for every mutation was about 2% of
		// a single-row write's server CPU.
		f := func() string { return fmt.Sprintf("%s[%d]", field, i) }
		switch m := m.GetMutation().(type) {
		case *bigtablepb.Mutation_SetCell_:
			sc := m.SetCell
			ts := sc.GetTimestampMicros()
			if millis && ts != cell.ServerTimestamp && ts%1000 != 0 {
				return nil, &cell.InvalidArgumentError{Field: f() + ".set_cell.timestamp_micros",
					Reason: fmt.Sprintf("timestamp %d is not a multiple of 1000: the table's granularity is MILLIS", ts)}
			}
			out = append(out, cell.Set(sc.GetFamilyName(), nonNil(sc.GetColumnQualifier()), ts, nonNil(sc.GetValue())))
		case *bigtablepb.Mutation_DeleteFromColumn_:
			dc := m.DeleteFromColumn
			var start, end int64
			if tr := dc.GetTimeRange(); tr != nil {
				start, end = tr.GetStartTimestampMicros(), tr.GetEndTimestampMicros()
			}
			if end != 0 && start >= end {
				// Cloud Bigtable (and its emulator) refuse an empty
				// or inverted range rather than delete nothing.
				return nil, &cell.InvalidArgumentError{Field: f() + ".delete_from_column.time_range",
					Reason: fmt.Sprintf("inverted or empty range [%d, %d)", start, end)}
			}
			if millis && (start%1000 != 0 || end%1000 != 0) {
				return nil, &cell.InvalidArgumentError{Field: f() + ".delete_from_column.time_range",
					Reason: fmt.Sprintf("[%d, %d) is not in whole milliseconds: the table's granularity is MILLIS", start, end)}
			}
			out = append(out, cell.DeleteColumn(dc.GetFamilyName(), nonNil(dc.GetColumnQualifier()), start, end))
		case *bigtablepb.Mutation_AddToCell_:
			mu, err := convertAggregate(f()+".add_to_cell", millis, cell.AddToCell, m.AddToCell.GetFamilyName(), m.AddToCell.GetColumnQualifier(), m.AddToCell.GetTimestamp(), m.AddToCell.GetInput())
			if err != nil {
				return nil, err
			}
			out = append(out, mu)
		case *bigtablepb.Mutation_MergeToCell_:
			mu, err := convertAggregate(f()+".merge_to_cell", millis, cell.MergeToCell, m.MergeToCell.GetFamilyName(), m.MergeToCell.GetColumnQualifier(), m.MergeToCell.GetTimestamp(), m.MergeToCell.GetInput())
			if err != nil {
				return nil, err
			}
			out = append(out, mu)
		case *bigtablepb.Mutation_DeleteFromFamily_:
			out = append(out, cell.DeleteFamily(m.DeleteFromFamily.GetFamilyName()))
		case *bigtablepb.Mutation_DeleteFromRow_:
			out = append(out, cell.DeleteRow())
		case nil:
			return nil, &cell.InvalidArgumentError{Field: f(), Reason: "no mutation set"}
		default:
			return nil, &cell.InvalidArgumentError{Field: f(), Reason: fmt.Sprintf("mutation %T is not supported", m)}
		}
	}
	return out, nil
}

// convertAggregate converts an AddToCell or MergeToCell, whose qualifier,
// timestamp and input are typed Values: the qualifier raw bytes, the
// timestamp raw microseconds (unset: 0), an AddToCell's input an Int64
// (int_value, or its 8-byte big-endian raw_value), a MergeToCell's input
// the raw state. Whether the family aggregates, and the state's encoding,
// the tablet checks.
func convertAggregate(f string, millis bool, kind cell.MutationKind, family string, qual, ts, input *bigtablepb.Value) (cell.Mutation, error) {
	m := cell.Mutation{Kind: kind, Family: family, Qualifier: []byte{}}
	switch q := qual.GetKind().(type) {
	case *bigtablepb.Value_RawValue:
		m.Qualifier = nonNil(q.RawValue)
	case nil:
	default:
		return m, &cell.InvalidArgumentError{Field: f + ".column_qualifier", Reason: fmt.Sprintf("a column qualifier is raw_value bytes, got %T", q)}
	}
	switch v := ts.GetKind().(type) {
	case *bigtablepb.Value_RawTimestampMicros:
		m.Timestamp = v.RawTimestampMicros
	case nil:
	default:
		return m, &cell.InvalidArgumentError{Field: f + ".timestamp", Reason: fmt.Sprintf("a timestamp is raw_timestamp_micros, got %T", v)}
	}
	if millis && m.Timestamp%1000 != 0 {
		return m, &cell.InvalidArgumentError{Field: f + ".timestamp",
			Reason: fmt.Sprintf("timestamp %d is not a multiple of 1000: the table's granularity is MILLIS", m.Timestamp)}
	}
	switch v := input.GetKind().(type) {
	case *bigtablepb.Value_IntValue:
		if kind != cell.AddToCell {
			return m, &cell.InvalidArgumentError{Field: f + ".input", Reason: "a merge_to_cell input is the raw_value of an aggregate state, got int_value"}
		}
		m.Value = binary.BigEndian.AppendUint64(nil, uint64(v.IntValue))
	case *bigtablepb.Value_RawValue:
		if kind == cell.AddToCell && len(v.RawValue) != 8 {
			return m, &cell.InvalidArgumentError{Field: f + ".input", Reason: fmt.Sprintf("an Int64 input is int_value or 8 raw big-endian bytes, got %d bytes", len(v.RawValue))}
		}
		m.Value = nonNil(v.RawValue)
	case nil:
		return m, &cell.InvalidArgumentError{Field: f + ".input", Reason: "no input set"}
	default:
		return m, &cell.InvalidArgumentError{Field: f + ".input", Reason: fmt.Sprintf("the families' input type is Int64: int_value or raw_value, got %T", v)}
	}
	return m, nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// checkFamilies returns a *tablet.FamilyNotFoundError for the first
// mutation naming a family the table does not have, and an invalid
// argument for one not matching its family's type. Tablets check this
// too; CheckAndMutateRow checks both branches up front so that a bad
// branch is an error whichever branch the predicate picks.
func checkFamilies(field string, t meta.Table, muts []cell.Mutation) error {
	return tablet.CheckFamilies(field, muts, t.Families)
}

// RowRanges converts a RowSet to sorted, disjoint ranges (End nil when
// unbounded). An empty RowSet is every row. Keys become one-row ranges, so
// duplicates and overlaps merge away and rows come out once, in order.
func RowRanges(rs *bigtablepb.RowSet) ([]tabletdesc.KeyRange, error) {
	if rs == nil || (len(rs.RowKeys) == 0 && len(rs.RowRanges) == 0) {
		return []tabletdesc.KeyRange{{Start: []byte{}}}, nil
	}
	var out []tabletdesc.KeyRange
	for _, k := range rs.RowKeys {
		out = append(out, tabletdesc.KeyRange{Start: k, End: append(bytes.Clone(k), 0)})
	}
	for i, r := range rs.RowRanges {
		kr := tabletdesc.KeyRange{Start: []byte{}}
		switch s := r.StartKey.(type) {
		case *bigtablepb.RowRange_StartKeyClosed:
			kr.Start = s.StartKeyClosed
		case *bigtablepb.RowRange_StartKeyOpen:
			kr.Start = append(bytes.Clone(s.StartKeyOpen), 0)
		}
		// An empty end key, like an unset one, is the end of the
		// table, as Cloud Bigtable reads it.
		switch e := r.EndKey.(type) {
		case *bigtablepb.RowRange_EndKeyClosed:
			if len(e.EndKeyClosed) > 0 {
				kr.End = append(bytes.Clone(e.EndKeyClosed), 0)
			}
		case *bigtablepb.RowRange_EndKeyOpen:
			if len(e.EndKeyOpen) > 0 {
				kr.End = e.EndKeyOpen
			}
		}
		if kr.Empty() {
			if !bytes.Equal(kr.Start, kr.End) {
				return nil, invalidf(fmt.Sprintf("rows.row_ranges[%d]", i), "start key %q is after end key %q", kr.Start, kr.End)
			}
			continue // [k, k): no row
		}
		out = append(out, kr)
	}
	slices.SortFunc(out, func(a, b tabletdesc.KeyRange) int { return bytes.Compare(a.Start, b.Start) })
	merged := out[:0]
	for _, r := range out {
		if n := len(merged); n > 0 {
			last := &merged[n-1]
			// r overlaps last or touches it (starts at its end).
			if last.EndsAfter(r.Start) || bytes.Equal(r.Start, last.End) {
				if tabletdesc.CompareEnds(r.End, last.End) > 0 {
					last.End = r.End
				}
				continue
			}
		}
		merged = append(merged, r)
	}
	return merged, nil
}
