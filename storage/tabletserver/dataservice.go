package tabletserver

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/internal/ctxtime"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/filter"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
	"github.com/tabuladb/tabula/storage/tabletserver/tabletpb"
)

// Defaults of DataOptions.
const (
	DefaultChunkBytes    = 1 << 20
	DefaultResponseBytes = 1 << 20
	DefaultSampleBytes   = 16 << 20
	// firstResponseBytes is the size of a scan's first response; each
	// next one is twice the last, up to DataOptions.ResponseBytes. A
	// client decodes nothing before a whole response has arrived, so a
	// stream's first rows wait for its first response: at 1 MiB, 1.3–4
	// ms of the server's scan, which a beamio.Read paid once per
	// restriction, with its pipeline idle (BENCHMARKS.md, session 14).
	firstResponseBytes = 64 << 10
	// MaxRequestBytes is the gRPC receive limit a server of the
	// DataService should set (grpc.MaxRecvMsgSize): large enough for a
	// row mutation carrying a cell of the 100 MiB value limit.
	MaxRequestBytes = 256 << 20
	// maxBulkConcurrency bounds the rows DropRowRange deletes at
	// once; concurrent deletes share group commits of the log.
	maxBulkConcurrency = 64
)

// DataOptions configure NewDataService. Zero values take the documented
// defaults.
type DataOptions struct {
	// Logger receives request errors the server is to blame for; default
	// the Host's logger.
	Logger *slog.Logger
	// ChunkBytes is the largest value piece in one CellChunk: larger
	// cells are split over several chunks; default 1 MiB.
	ChunkBytes int
	// ResponseBytes: a ReadRowsResponse is sent once its chunks hold this
	// many bytes; default 1 MiB.
	ResponseBytes int
	// SampleBytes is the spacing, in stored bytes, of the keys
	// SampleRowKeys returns within a tablet (tablet boundaries are always
	// returned); default 16 MiB.
	SampleBytes int64
	// FilterLimits bound the filters requests may send.
	FilterLimits filter.Limits
	// Rand is the source of row_sample_filter's coin flips; default
	// math/rand/v2.
	Rand func() float64
	// EncodedResponses: ReadRows writes its responses straight into
	// their wire form and sends them as RawFrames (readrows_encode.go).
	// Only for a server whose codec is ServerCodec or Codec (or passes
	// RawFrames to it): gRPC's proto codec refuses them.
	EncodedResponses bool
}

// DataService implements google.bigtable.v2.Bigtable over a Host's
// tablets. Register it with bigtablepb.RegisterBigtableServer on a
// grpc.Server created with grpc.MaxRecvMsgSize(MaxRequestBytes) and the
// Host's interceptors.
type DataService struct {
	bigtablepb.UnimplementedBigtableServer
	host    *Host
	opts    DataOptions
	log     *slog.Logger
	filters *filterCache
}

// NewDataService returns the data API over host.
func NewDataService(host *Host, opts DataOptions) *DataService {
	if opts.Logger == nil {
		opts.Logger = host.log
	}
	if opts.ChunkBytes <= 0 {
		opts.ChunkBytes = DefaultChunkBytes
	}
	if opts.ResponseBytes <= 0 {
		opts.ResponseBytes = DefaultResponseBytes
	}
	if opts.SampleBytes <= 0 {
		opts.SampleBytes = DefaultSampleBytes
	}
	return &DataService{host: host, opts: opts, log: opts.Logger, filters: newFilterCache()}
}

// lookup parses a table name and returns the open table's entry.
func (s *DataService) lookup(name string) (meta.Table, error) {
	if name == "" {
		return meta.Table{}, invalidf("table_name", "required (authorized views and materialized views are not supported)")
	}
	return s.host.lookupTable(name)
}

// lookupTable parses a request's table_name and returns the entry of the
// open table: INVALID_ARGUMENT for a malformed name, NOT_FOUND for a table
// this server does not hold.
func (h *Host) lookupTable(name string) (meta.Table, error) {
	if name == "" {
		return meta.Table{}, invalidf("table_name", "required")
	}
	id, err := meta.ParseTableName(name)
	if err != nil {
		return meta.Table{}, invalidf("table_name", "%v", err)
	}
	t, err := h.tableMeta(id)
	if err != nil {
		if h.opts.Partial {
			// In a cluster the table exists elsewhere (or nowhere: the
			// client learns that from METADATA): a caller whose location
			// is stale must look it up again, not give up.
			return meta.Table{}, h.toStatus(&tabletdesc.NotServingError{Tablet: id.String(), Reason: "no tablet of the table is served here"})
		}
		return meta.Table{}, status.Errorf(codes.NotFound, "table %q not found", name)
	}
	return t, nil
}

// fail converts err to a status and logs the errors that are the server's.
// "Not serving" is not one: it is how a caller with a stale location learns
// that a tablet moved or split (one per row of a MutateRows sent during a
// move), so it is logged at debug level only.
func (s *DataService) fail(method string, err error) error {
	err = s.host.toStatus(err)
	switch {
	case tabletpb.IsNotServing(err):
		s.log.Debug("request for a tablet not served here", "method", method, "err", err)
	case status.Code(err) == codes.Internal, status.Code(err) == codes.Unavailable, status.Code(err) == codes.FailedPrecondition:
		s.log.Error("request failed", "method", method, "err", err)
	}
	return err
}

// countMutations is the number of mutations in entries.
func countMutations(entries []*bigtablepb.MutateRowsRequest_Entry) int {
	n := 0
	for _, e := range entries {
		n += len(e.GetMutations())
	}
	return n
}

// checkEntries refuses a MutateRows request with no entries or more than
// limit mutations in all: the whole request fails, before any entry is
// applied or routed.
func checkEntries(entries []*bigtablepb.MutateRowsRequest_Entry, limit int) error {
	if len(entries) == 0 {
		return invalidf("entries", "no entries given")
	}
	total := 0
	for _, e := range entries {
		total += len(e.GetMutations())
	}
	if total > limit {
		return invalidf("entries", "%d mutations in the request, the limit is %d", total, limit)
	}
	return nil
}

// apply applies one row mutation through the routing of the Host.
func (s *DataService) apply(ctx context.Context, id meta.TableID, rm cell.RowMutation) error {
	err := s.host.writeTablet(ctx, id, rm.Row, func(tb *tablet.Tablet) error {
		if err := tb.Apply(ctx, rm); err != nil {
			return err
		}
		s.host.noteWrite()
		return nil
	})
	if err == nil {
		s.host.metrics.bytesWritten.Add(float64(rm.Size()))
	}
	return err
}

// MutateRow applies the mutations of one row atomically.
func (s *DataService) MutateRow(ctx context.Context, req *bigtablepb.MutateRowRequest) (*bigtablepb.MutateRowResponse, error) {
	t, err := s.lookup(req.GetTableName())
	if err != nil {
		return nil, err
	}
	muts, err := convertMutations("mutations", t, req.GetMutations())
	if err != nil {
		return nil, s.fail("MutateRow", err)
	}
	if err := s.apply(ctx, t.ID, cell.RowMutation{Row: req.GetRowKey(), Mutations: muts}); err != nil {
		return nil, s.fail("MutateRow", err)
	}
	return &bigtablepb.MutateRowResponse{}, nil
}

// MutateRows applies each entry atomically and independently: the
// response carries one status per entry, so an invalid entry fails alone.
// Entries for the same row are applied in request order; different rows
// concurrently, so that they share the commit log's group commits.
func (s *DataService) MutateRows(req *bigtablepb.MutateRowsRequest, stream bigtablepb.Bigtable_MutateRowsServer) error {
	ctx := stream.Context()
	t, err := s.lookup(req.GetTableName())
	if err != nil {
		return err
	}
	entries := req.GetEntries()
	if err := checkEntries(entries, s.host.opts.Limits.MaxMutations); err != nil {
		return err
	}
	statuses := make([]error, len(entries))
	rms := make([]cell.RowMutation, len(entries))
	// All rows' mutations in one slice, each row's a full slice of its
	// own part (appending to one cannot overwrite the next).
	all := make([]cell.Mutation, 0, countMutations(entries))
	for i, e := range entries {
		start := len(all)
		out, err := appendMutations(all, "mutations", t, e.GetMutations())
		if err != nil {
			statuses[i] = err
			continue
		}
		all = out
		rms[i] = cell.RowMutation{Row: e.GetRowKey(), Mutations: all[start:len(all):len(all)]}
	}
	if err := s.host.applyBatch(ctx, t.ID, rms, statuses); err != nil {
		return s.fail("MutateRows", err)
	}
	written := 0
	for i, err := range statuses {
		if err != nil {
			statuses[i] = prefixField(fmt.Sprintf("entries[%d]", i), err)
		} else {
			written += rms[i].Size()
		}
	}
	s.host.metrics.bytesWritten.Add(float64(written))
	// The entries in one slice, and one OK status shared by all that
	// succeeded (the client wants a status on every entry): the encoder
	// only reads them.
	resp := &bigtablepb.MutateRowsResponse{Entries: make([]*bigtablepb.MutateRowsResponse_Entry, len(entries))}
	slab := make([]bigtablepb.MutateRowsResponse_Entry, len(entries))
	ok := &statuspb.Status{}
	for i, err := range statuses {
		st := ok
		if err != nil {
			st = status.Convert(s.fail("MutateRows", err)).Proto()
		}
		slab[i].Index, slab[i].Status = int64(i), st
		resp.Entries[i] = &slab[i]
	}
	return stream.Send(resp)
}

// CheckAndMutateRow evaluates the predicate on the row's current cells
// and applies true_mutations or false_mutations, atomically with respect
// to every other write of the row. Without a predicate the row matches
// when it has any cell.
func (s *DataService) CheckAndMutateRow(ctx context.Context, req *bigtablepb.CheckAndMutateRowRequest) (*bigtablepb.CheckAndMutateRowResponse, error) {
	t, err := s.lookup(req.GetTableName())
	if err != nil {
		return nil, err
	}
	pred, err := s.compileFilter(req.GetPredicateFilter(), "predicate_filter")
	if err != nil {
		return nil, err
	}
	trueMuts, err := convertMutations("true_mutations", t, req.GetTrueMutations())
	if err != nil {
		return nil, s.fail("CheckAndMutateRow", err)
	}
	falseMuts, err := convertMutations("false_mutations", t, req.GetFalseMutations())
	if err != nil {
		return nil, s.fail("CheckAndMutateRow", err)
	}
	// Both branches are validated whichever runs: bad input changes
	// nothing, and whether it is bad must not depend on the data.
	lim := s.host.opts.Limits
	for _, b := range []struct {
		field string
		muts  []cell.Mutation
	}{{"true_mutations", trueMuts}, {"false_mutations", falseMuts}} {
		if len(b.muts) == 0 {
			continue
		}
		if err := lim.ValidateRowMutation(cell.RowMutation{Row: req.GetRowKey(), Mutations: b.muts}); err != nil {
			return nil, s.fail("CheckAndMutateRow", renameMutations(b.field, err))
		}
		if err := checkFamilies(b.field, t, b.muts); err != nil {
			return nil, s.fail("CheckAndMutateRow", err)
		}
	}
	if err := lim.ValidateRowKey("row_key", req.GetRowKey()); err != nil {
		return nil, s.fail("CheckAndMutateRow", err)
	}
	var matched bool
	err = s.host.writeTablet(ctx, t.ID, req.GetRowKey(), func(tb *tablet.Tablet) error {
		_, err := tb.ReadModifyWrite(ctx, req.GetRowKey(), func(cur cell.Row) ([]cell.Mutation, error) {
			if req.GetPredicateFilter() == nil {
				matched = len(cur.Cells) > 0
			} else {
				matched = pred.Match(cur)
			}
			if matched {
				return trueMuts, nil
			}
			return falseMuts, nil
		})
		if err == nil {
			s.host.noteWrite()
		}
		return err
	})
	if err != nil {
		return nil, s.fail("CheckAndMutateRow", err)
	}
	return &bigtablepb.CheckAndMutateRowResponse{PredicateMatched: matched}, nil
}

// renameMutations replaces the "mutations" field cell's validation names
// with the request's field for the branch.
func renameMutations(field string, err error) error {
	var ie *cell.InvalidArgumentError
	if errors.As(err, &ie) && len(ie.Field) >= len("mutations") && ie.Field[:len("mutations")] == "mutations" {
		return &cell.InvalidArgumentError{Field: field + ie.Field[len("mutations"):], Reason: ie.Reason}
	}
	return err
}

// errWrongSize is returned by an increment of a value that is not a 64-bit
// integer.
type errWrongSize struct {
	field  string
	column string
	size   int
}

func (e *errWrongSize) Error() string {
	return fmt.Sprintf("%s: the existing value of %s is %d bytes; increment_amount needs a 64-bit big-endian integer (8 bytes)", e.field, e.column, e.size)
}

// GRPCStatus makes the error FAILED_PRECONDITION: the request is valid,
// the row's state is not what it needs.
func (e *errWrongSize) GRPCStatus() *status.Status {
	return status.New(codes.FailedPrecondition, e.Error())
}

// ReadModifyWriteRow applies append and increment rules to the latest
// cells of their columns, atomically, and returns the new cells. Each new
// cell gets the timestamp max(now, the latest cell's), as Cloud Bigtable
// does, so it becomes (or replaces) the column's newest version. Rules on
// the same column apply in order, each to the previous one's result.
func (s *DataService) ReadModifyWriteRow(ctx context.Context, req *bigtablepb.ReadModifyWriteRowRequest) (*bigtablepb.ReadModifyWriteRowResponse, error) {
	t, err := s.lookup(req.GetTableName())
	if err != nil {
		return nil, err
	}
	rules := req.GetRules()
	if len(rules) == 0 {
		return nil, invalidf("rules", "no rules given")
	}
	if lim := s.host.opts.Limits.MaxMutations; len(rules) > lim {
		return nil, invalidf("rules", "%d rules, the limit is %d", len(rules), lim)
	}
	lim := s.host.opts.Limits
	if err := lim.ValidateRowKey("row_key", req.GetRowKey()); err != nil {
		return nil, s.fail("ReadModifyWriteRow", err)
	}
	for i, r := range rules {
		f := fmt.Sprintf("rules[%d]", i)
		if err := cell.ValidateFamilyName(f+".family_name", r.GetFamilyName()); err != nil {
			return nil, s.fail("ReadModifyWriteRow", err)
		}
		fam, ok := t.Families[r.GetFamilyName()]
		if !ok {
			return nil, s.fail("ReadModifyWriteRow", &tablet.FamilyNotFoundError{Family: r.GetFamilyName(), Field: f + ".family_name"})
		}
		if fam.Aggregate != cell.NoAggregator {
			return nil, invalidf(f+".family_name", "column family %q is an aggregate (%s) family: write it with add_to_cell or merge_to_cell in MutateRow", r.GetFamilyName(), fam.Aggregate)
		}
		if len(r.GetColumnQualifier()) > lim.MaxQualifierBytes {
			return nil, invalidf(f+".column_qualifier", "qualifier is %d bytes, the limit is %d", len(r.GetColumnQualifier()), lim.MaxQualifierBytes)
		}
		if r.GetRule() == nil {
			return nil, invalidf(f, "neither append_value nor increment_amount set")
		}
	}
	clock := s.host.opts.Clock
	type col struct {
		family string
		qual   string
	}
	var result []cell.Cell
	err = s.host.writeTablet(ctx, t.ID, req.GetRowKey(), func(tb *tablet.Tablet) error {
		result = result[:0]
		_, err := tb.ReadModifyWrite(ctx, req.GetRowKey(), func(cur cell.Row) ([]cell.Mutation, error) {
			latest := make(map[col]cell.Cell)
			for _, c := range cur.Cells {
				k := col{c.Family, string(c.Qualifier)}
				if _, ok := latest[k]; !ok { // cells are newest first per column
					latest[k] = c
				}
			}
			now := clock()
			if t.Granularity == meta.GranularityMillis {
				now -= now % 1000
			}
			var order []col
			touched := make(map[col]bool)
			for i, r := range rules {
				k := col{r.GetFamilyName(), string(r.GetColumnQualifier())}
				prev, exists := latest[k]
				ts := now
				if exists && prev.Timestamp > ts {
					ts = prev.Timestamp
				}
				var val []byte
				switch rule := r.GetRule().(type) {
				case *bigtablepb.ReadModifyWriteRule_AppendValue:
					val = append(bytes.Clone(prev.Value), rule.AppendValue...)
				case *bigtablepb.ReadModifyWriteRule_IncrementAmount:
					var v int64
					if exists {
						if len(prev.Value) != 8 {
							return nil, &errWrongSize{field: fmt.Sprintf("rules[%d].increment_amount", i),
								column: r.GetFamilyName() + ":" + string(r.GetColumnQualifier()), size: len(prev.Value)}
						}
						v = int64(binary.BigEndian.Uint64(prev.Value))
					}
					val = binary.BigEndian.AppendUint64(nil, uint64(v+rule.IncrementAmount))
				}
				if !touched[k] {
					touched[k] = true
					order = append(order, k)
				}
				latest[k] = cell.Cell{Family: k.family, Qualifier: []byte(k.qual), Timestamp: ts, Value: val}
			}
			muts := make([]cell.Mutation, 0, len(order))
			for _, k := range order {
				c := latest[k]
				muts = append(muts, cell.Set(c.Family, c.Qualifier, c.Timestamp, c.Value))
				result = append(result, c)
			}
			return muts, nil
		})
		if err == nil {
			s.host.noteWrite()
		}
		return err
	})
	if err != nil {
		return nil, s.fail("ReadModifyWriteRow", err)
	}
	return &bigtablepb.ReadModifyWriteRowResponse{Row: rowProto(req.GetRowKey(), result)}, nil
}

// rowProto builds a Row message from cells, sorting them as a row is
// presented: family, qualifier ascending.
func rowProto(key []byte, cells []cell.Cell) *bigtablepb.Row {
	sorted := append([]cell.Cell(nil), cells...)
	sortCells(sorted)
	row := &bigtablepb.Row{Key: key}
	var fam *bigtablepb.Family
	var col *bigtablepb.Column
	for _, c := range sorted {
		if fam == nil || fam.Name != c.Family {
			fam = &bigtablepb.Family{Name: c.Family}
			row.Families = append(row.Families, fam)
			col = nil
		}
		if col == nil || !bytes.Equal(col.Qualifier, c.Qualifier) {
			col = &bigtablepb.Column{Qualifier: c.Qualifier}
			fam.Columns = append(fam.Columns, col)
		}
		col.Cells = append(col.Cells, &bigtablepb.Cell{TimestampMicros: c.Timestamp, Value: c.Value})
	}
	return row
}

// SampleRowKeys returns row keys that divide the table into pieces of
// about DataOptions.SampleBytes, with the stored bytes before each:
// every tablet boundary, keys within tablets from their SSTable indexes
// and memtables, and last the empty key with the table's total size, as
// Cloud Bigtable answers.
func (s *DataService) SampleRowKeys(req *bigtablepb.SampleRowKeysRequest, stream bigtablepb.Bigtable_SampleRowKeysServer) error {
	t, err := s.lookup(req.GetTableName())
	if err != nil {
		return err
	}
	var out []*bigtablepb.SampleRowKeysResponse
	// A split under way closes a tablet of the list: sample the new list,
	// backing off as withTablet does (a split under load can leave its
	// rows unserved for tens of milliseconds).
	backoff := notServingBackoff
	for attempt := 0; ; attempt++ {
		out, err = s.sampleTable(t.ID)
		if !errors.Is(err, tabletdesc.ErrNotServing) || attempt >= notServingRetries {
			break
		}
		if err := ctxtime.Sleep(stream.Context(), backoff); err != nil {
			return s.fail("SampleRowKeys", err)
		}
		backoff = min(2*backoff, notServingMaxBackoff)
	}
	if err != nil {
		return s.fail("SampleRowKeys", err)
	}
	// Keys must ascend strictly: drop a within-tablet key that reached
	// the tablet's end.
	var prev []byte
	for _, r := range out {
		if len(r.RowKey) > 0 && prev != nil && bytes.Compare(r.RowKey, prev) <= 0 {
			continue
		}
		prev = r.RowKey
		if err := stream.Send(r); err != nil {
			return err
		}
	}
	return nil
}

// sampleTable returns the samples of every tablet of a table, in order,
// ending with the empty key and the total size.
func (s *DataService) sampleTable(id meta.TableID) ([]*bigtablepb.SampleRowKeysResponse, error) {
	st, err := s.host.table(id)
	if err != nil {
		return nil, err
	}
	var out []*bigtablepb.SampleRowKeysResponse
	var base int64
	for _, tb := range st.list() {
		samples, err := tb.SampleKeys()
		if err != nil {
			return nil, err
		}
		var last int64
		for _, smp := range samples {
			if smp.Offset-last < s.opts.SampleBytes {
				continue
			}
			last = smp.Offset
			// The sample is the last key of a block: the rows up to
			// and including it are before the offset. Clients read
			// a key as the exclusive end of a piece, so return the
			// key just after it.
			out = append(out, &bigtablepb.SampleRowKeysResponse{RowKey: append(bytes.Clone(smp.Row), 0), OffsetBytes: base + smp.Offset})
		}
		if n := len(samples); n > 0 {
			base += samples[n-1].Offset
		}
		if r := tb.Range(); !r.Unbounded() {
			out = append(out, &bigtablepb.SampleRowKeysResponse{RowKey: r.End, OffsetBytes: base})
		}
	}
	return append(out, &bigtablepb.SampleRowKeysResponse{RowKey: []byte{}, OffsetBytes: base}), nil
}

// PingAndWarm answers OK for a known instance: there is nothing to warm.
func (s *DataService) PingAndWarm(ctx context.Context, req *bigtablepb.PingAndWarmRequest) (*bigtablepb.PingAndWarmResponse, error) {
	if _, _, err := meta.ParseInstanceName(req.GetName()); err != nil {
		return nil, invalidf("name", "%v", err)
	}
	return &bigtablepb.PingAndWarmResponse{}, nil
}

// compileFilter compiles a request's filter, rooted at field.
func (s *DataService) compileFilter(f *bigtablepb.RowFilter, field string) (*filter.Filter, error) {
	opts := []filter.Option{filter.WithField(field)}
	if s.opts.Rand != nil {
		opts = append(opts, filter.WithRand(s.opts.Rand))
	}
	return s.filters.compile(f, field, func() (*filter.Filter, error) {
		return filter.Compile(f, s.opts.FilterLimits, opts...)
	})
}
