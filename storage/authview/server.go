package authview

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sync"
	"time"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/storage/meta"
)

// DefaultCacheTTL is how long a table's views are cached by default.
const DefaultCacheTTL = time.Second

// Options configure Wrap.
type Options struct {
	// Catalog holds the tables' entries with their views. Required.
	Catalog meta.Catalog
	// Instance, when set, maps every view name's instance to this one
	// (tabula dev --instance-agnostic); the rewritten table_name then
	// names it.
	Instance string
	// CacheTTL is how long a table's entry is reused; default
	// DefaultCacheTTL, negative: never cached.
	CacheTTL time.Duration
	// Now is the clock of the cache; default time.Now.
	Now func() time.Time
}

// Server is a google.bigtable.v2.Bigtable server enforcing authorized
// views in front of another (see the package doc). Requests without
// authorized_view_name pass through unchanged.
type Server struct {
	bigtablepb.BigtableServer
	opts Options

	mu    sync.Mutex
	cache map[meta.TableID]cached
}

type cached struct {
	t       meta.Table
	fetched time.Time
}

// Wrap returns inner with authorized views enforced.
func Wrap(inner bigtablepb.BigtableServer, opts Options) *Server {
	if opts.CacheTTL == 0 {
		opts.CacheTTL = DefaultCacheTTL
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Server{BigtableServer: inner, opts: opts, cache: map[meta.TableID]cached{}}
}

// resolved is a request's view and the table_name to send on.
type resolved struct {
	table string
	view  meta.AuthorizedView
	t     meta.Table
}

// resolve parses an authorized_view_name and finds the view: INVALID_ARGUMENT
// for a malformed name or one sent with a table_name, NOT_FOUND for a
// table or view that does not exist.
func (s *Server) resolve(ctx context.Context, viewName, tableName string) (resolved, error) {
	if tableName != "" {
		return resolved{}, status.Errorf(codes.InvalidArgument, "authorized_view_name: set either table_name or authorized_view_name, not both")
	}
	n, err := meta.ParseAuthorizedViewName(viewName)
	if err != nil {
		return resolved{}, status.Errorf(codes.InvalidArgument, "authorized_view_name: %v", err)
	}
	instance := n.Table.Instance
	if s.opts.Instance != "" {
		n.Table.Instance = s.opts.Instance
	}
	t, err := s.table(ctx, n.Table)
	if errors.Is(err, meta.ErrTableNotFound) {
		return resolved{}, status.Errorf(codes.NotFound, "table %q of authorized view %q not found", n.Table.Table, viewName)
	}
	if err != nil {
		if _, ok := status.FromError(err); ok {
			return resolved{}, err
		}
		return resolved{}, status.Errorf(codes.Unavailable, "reading the authorized view %q: %v", viewName, err)
	}
	v, ok := t.AuthorizedViews[n.View]
	if !ok {
		return resolved{}, status.Errorf(codes.NotFound, "authorized view %q not found", viewName)
	}
	table := "projects/" + n.Project + "/instances/" + instance + "/tables/" + n.Table.Table
	if s.opts.Instance != "" {
		table = "projects/" + n.Project + "/instances/" + s.opts.Instance + "/tables/" + n.Table.Table
	}
	return resolved{table: table, view: v, t: t}, nil
}

func (s *Server) table(ctx context.Context, id meta.TableID) (meta.Table, error) {
	now := s.opts.Now()
	if s.opts.CacheTTL > 0 {
		s.mu.Lock()
		c, ok := s.cache[id]
		s.mu.Unlock()
		if ok && now.Sub(c.fetched) < s.opts.CacheTTL {
			return c.t, nil
		}
	}
	t, err := s.opts.Catalog.Get(ctx, id)
	if err != nil {
		return meta.Table{}, err
	}
	if s.opts.CacheTTL > 0 {
		s.mu.Lock()
		if len(s.cache) > 10000 {
			clear(s.cache)
		}
		s.cache[id] = cached{t: t, fetched: now}
		s.mu.Unlock()
	}
	return t, nil
}

// --- reads ---

// ReadRows reads the view's part of the requested rows.
func (s *Server) ReadRows(req *bigtablepb.ReadRowsRequest, stream bigtablepb.Bigtable_ReadRowsServer) error {
	if req.GetAuthorizedViewName() == "" {
		return s.BigtableServer.ReadRows(req, stream)
	}
	r, err := s.resolve(stream.Context(), req.GetAuthorizedViewName(), req.GetTableName())
	if err != nil {
		return err
	}
	out := proto.Clone(req).(*bigtablepb.ReadRowsRequest)
	out.TableName, out.AuthorizedViewName = r.table, ""
	rows, any := RestrictRows(req.GetRows(), r.view)
	if !any {
		return nil // nothing of the view was asked for
	}
	out.Rows = rows
	out.Filter = RestrictFilter(req.GetFilter(), r.view)
	return s.BigtableServer.ReadRows(out, stream)
}

// SampleRowKeys samples the table and keeps the samples bounding a part
// that overlaps the view.
func (s *Server) SampleRowKeys(req *bigtablepb.SampleRowKeysRequest, stream bigtablepb.Bigtable_SampleRowKeysServer) error {
	if req.GetAuthorizedViewName() == "" {
		return s.BigtableServer.SampleRowKeys(req, stream)
	}
	r, err := s.resolve(stream.Context(), req.GetAuthorizedViewName(), req.GetTableName())
	if err != nil {
		return err
	}
	out := proto.Clone(req).(*bigtablepb.SampleRowKeysRequest)
	out.TableName, out.AuthorizedViewName = r.table, ""
	return s.BigtableServer.SampleRowKeys(out, &sampleStream{Bigtable_SampleRowKeysServer: stream, ranges: r.view.RowRanges()})
}

// sampleStream drops the samples whose part of the table, [previous
// sample, sample), misses every range of the view.
type sampleStream struct {
	bigtablepb.Bigtable_SampleRowKeysServer
	ranges []meta.KeyRange
	prev   []byte
}

func (s *sampleStream) Send(resp *bigtablepb.SampleRowKeysResponse) error {
	part := meta.KeyRange{Start: s.prev, End: resp.GetRowKey()}
	if len(part.End) == 0 {
		part.End = nil // the last sample: the end of the table
	}
	s.prev = resp.GetRowKey()
	for _, r := range s.ranges {
		if overlaps(part, r) {
			return s.Bigtable_SampleRowKeysServer.Send(resp)
		}
	}
	return nil
}

func overlaps(a, b meta.KeyRange) bool {
	return (a.End == nil || bytes.Compare(b.Start, a.End) < 0) && (b.End == nil || bytes.Compare(a.Start, b.End) < 0)
}

// --- writes ---

func denied(field, format string, args ...any) error {
	return status.Errorf(codes.PermissionDenied, "%s: %s", field, fmt.Sprintf(format, args...))
}

// CheckRow returns PERMISSION_DENIED naming field unless the row is in the
// view.
func CheckRow(field string, key []byte, v meta.AuthorizedView) error {
	if !v.CoversRow(key) {
		return denied(field, "row %q is outside the authorized view", key)
	}
	return nil
}

// CheckMutations returns PERMISSION_DENIED naming the first mutation (field
// is the mutations' path) that touches a cell outside the view of table t.
func CheckMutations(field string, muts []*bigtablepb.Mutation, v meta.AuthorizedView, t meta.Table) error {
	for i, m := range muts {
		f := fmt.Sprintf("%s[%d]", field, i)
		switch x := m.GetMutation().(type) {
		case *bigtablepb.Mutation_SetCell_:
			if !v.CoversColumn(x.SetCell.GetFamilyName(), x.SetCell.GetColumnQualifier()) {
				return denied(f+".set_cell", "column %s:%q is outside the authorized view", x.SetCell.GetFamilyName(), x.SetCell.GetColumnQualifier())
			}
		case *bigtablepb.Mutation_AddToCell_:
			q := x.AddToCell.GetColumnQualifier().GetRawValue()
			if !v.CoversColumn(x.AddToCell.GetFamilyName(), q) {
				return denied(f+".add_to_cell", "column %s:%q is outside the authorized view", x.AddToCell.GetFamilyName(), q)
			}
		case *bigtablepb.Mutation_MergeToCell_:
			q := x.MergeToCell.GetColumnQualifier().GetRawValue()
			if !v.CoversColumn(x.MergeToCell.GetFamilyName(), q) {
				return denied(f+".merge_to_cell", "column %s:%q is outside the authorized view", x.MergeToCell.GetFamilyName(), q)
			}
		case *bigtablepb.Mutation_DeleteFromColumn_:
			if !v.CoversColumn(x.DeleteFromColumn.GetFamilyName(), x.DeleteFromColumn.GetColumnQualifier()) {
				return denied(f+".delete_from_column", "column %s:%q is outside the authorized view", x.DeleteFromColumn.GetFamilyName(), x.DeleteFromColumn.GetColumnQualifier())
			}
		case *bigtablepb.Mutation_DeleteFromFamily_:
			if !v.CoversFamily(x.DeleteFromFamily.GetFamilyName()) {
				return denied(f+".delete_from_family", "the authorized view does not cover all of family %q", x.DeleteFromFamily.GetFamilyName())
			}
		case *bigtablepb.Mutation_DeleteFromRow_:
			for _, fam := range slices.Sorted(maps.Keys(t.Families)) {
				if !v.CoversFamily(fam) {
					return denied(f+".delete_from_row", "the authorized view does not cover all of family %q of the row", fam)
				}
			}
		}
		// Other (or no) mutations are left to the server's own checks.
	}
	return nil
}

// MutateRow applies the mutations if the row and every cell they touch
// are in the view.
func (s *Server) MutateRow(ctx context.Context, req *bigtablepb.MutateRowRequest) (*bigtablepb.MutateRowResponse, error) {
	if req.GetAuthorizedViewName() == "" {
		return s.BigtableServer.MutateRow(ctx, req)
	}
	r, err := s.resolve(ctx, req.GetAuthorizedViewName(), req.GetTableName())
	if err != nil {
		return nil, err
	}
	if err := CheckRow("row_key", req.GetRowKey(), r.view); err != nil {
		return nil, err
	}
	if err := CheckMutations("mutations", req.GetMutations(), r.view, r.t); err != nil {
		return nil, err
	}
	out := proto.Clone(req).(*bigtablepb.MutateRowRequest)
	out.TableName, out.AuthorizedViewName = r.table, ""
	return s.BigtableServer.MutateRow(ctx, out)
}

// MutateRows applies the entries in the view and refuses the others, each
// with its own status.
func (s *Server) MutateRows(req *bigtablepb.MutateRowsRequest, stream bigtablepb.Bigtable_MutateRowsServer) error {
	if req.GetAuthorizedViewName() == "" {
		return s.BigtableServer.MutateRows(req, stream)
	}
	r, err := s.resolve(stream.Context(), req.GetAuthorizedViewName(), req.GetTableName())
	if err != nil {
		return err
	}
	out := proto.Clone(req).(*bigtablepb.MutateRowsRequest)
	out.TableName, out.AuthorizedViewName = r.table, ""
	out.Entries = nil
	var refused []*bigtablepb.MutateRowsResponse_Entry
	var index []int64 // index[i] is the caller's index of out.Entries[i]
	for i, e := range req.GetEntries() {
		field := fmt.Sprintf("entries[%d]", i)
		err := CheckRow(field+".row_key", e.GetRowKey(), r.view)
		if err == nil {
			err = CheckMutations(field+".mutations", e.GetMutations(), r.view, r.t)
		}
		if err != nil {
			st := status.Convert(err)
			refused = append(refused, &bigtablepb.MutateRowsResponse_Entry{Index: int64(i), Status: &statuspb.Status{Code: int32(st.Code()), Message: st.Message()}})
			continue
		}
		out.Entries = append(out.Entries, e)
		index = append(index, int64(i))
	}
	if len(req.GetEntries()) > 0 && len(out.Entries) == 0 {
		return stream.Send(&bigtablepb.MutateRowsResponse{Entries: refused})
	}
	if len(refused) > 0 {
		if err := stream.Send(&bigtablepb.MutateRowsResponse{Entries: refused}); err != nil {
			return err
		}
	}
	return s.BigtableServer.MutateRows(out, &mutateRowsStream{Bigtable_MutateRowsServer: stream, index: index})
}

// mutateRowsStream renumbers the inner server's entry indexes (of the
// entries passed on) to the caller's, in statuses' messages too.
type mutateRowsStream struct {
	bigtablepb.Bigtable_MutateRowsServer
	index []int64
}

var entryRef = regexp.MustCompile(`entries\[([0-9]+)\]`)

func (s *mutateRowsStream) Send(resp *bigtablepb.MutateRowsResponse) error {
	for _, e := range resp.GetEntries() {
		if e.GetIndex() >= 0 && e.GetIndex() < int64(len(s.index)) {
			e.Index = s.index[e.GetIndex()]
		}
		if st := e.GetStatus(); st != nil && st.GetMessage() != "" {
			st.Message = entryRef.ReplaceAllStringFunc(st.GetMessage(), func(m string) string {
				var j int
				if _, err := fmt.Sscanf(m, "entries[%d]", &j); err == nil && j < len(s.index) {
					return fmt.Sprintf("entries[%d]", s.index[j])
				}
				return m
			})
		}
	}
	return s.Bigtable_MutateRowsServer.Send(resp)
}

// CheckAndMutateRow checks the predicate over the view's cells of the row
// and applies a branch whose mutations are all in the view (both branches
// are checked before either may apply).
func (s *Server) CheckAndMutateRow(ctx context.Context, req *bigtablepb.CheckAndMutateRowRequest) (*bigtablepb.CheckAndMutateRowResponse, error) {
	if req.GetAuthorizedViewName() == "" {
		return s.BigtableServer.CheckAndMutateRow(ctx, req)
	}
	r, err := s.resolve(ctx, req.GetAuthorizedViewName(), req.GetTableName())
	if err != nil {
		return nil, err
	}
	if err := CheckRow("row_key", req.GetRowKey(), r.view); err != nil {
		return nil, err
	}
	if err := CheckMutations("true_mutations", req.GetTrueMutations(), r.view, r.t); err != nil {
		return nil, err
	}
	if err := CheckMutations("false_mutations", req.GetFalseMutations(), r.view, r.t); err != nil {
		return nil, err
	}
	out := proto.Clone(req).(*bigtablepb.CheckAndMutateRowRequest)
	out.TableName, out.AuthorizedViewName = r.table, ""
	// Without a predicate the true branch runs when the row has any cell:
	// any cell of the view, as the view's user sees it.
	out.PredicateFilter = RestrictFilter(req.GetPredicateFilter(), r.view)
	return s.BigtableServer.CheckAndMutateRow(ctx, out)
}

// ReadModifyWriteRow applies the rules if the row and every column they
// name are in the view.
func (s *Server) ReadModifyWriteRow(ctx context.Context, req *bigtablepb.ReadModifyWriteRowRequest) (*bigtablepb.ReadModifyWriteRowResponse, error) {
	if req.GetAuthorizedViewName() == "" {
		return s.BigtableServer.ReadModifyWriteRow(ctx, req)
	}
	r, err := s.resolve(ctx, req.GetAuthorizedViewName(), req.GetTableName())
	if err != nil {
		return nil, err
	}
	if err := CheckRow("row_key", req.GetRowKey(), r.view); err != nil {
		return nil, err
	}
	for i, rule := range req.GetRules() {
		if !r.view.CoversColumn(rule.GetFamilyName(), rule.GetColumnQualifier()) {
			return nil, denied(fmt.Sprintf("rules[%d]", i), "column %s:%q is outside the authorized view", rule.GetFamilyName(), rule.GetColumnQualifier())
		}
	}
	out := proto.Clone(req).(*bigtablepb.ReadModifyWriteRowRequest)
	out.TableName, out.AuthorizedViewName = r.table, ""
	return s.BigtableServer.ReadModifyWriteRow(ctx, out)
}
