package tabletserver

import (
	"bytes"
	"context"
	"testing"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// fakeStream is a server stream that collects what the handler sends.
type fakeStream[T any] struct {
	grpc.ServerStream
	ctx  context.Context
	sent []*T
}

func (s *fakeStream[T]) Context() context.Context { return s.ctx }
func (s *fakeStream[T]) Send(m *T) error {
	s.sent = append(s.sent, m)
	return nil
}

// FuzzRequests feeds arbitrary request messages to every RPC of the data
// API, in process: whatever the bytes, the server must not panic and must
// answer OK or a status that blames the request (never INTERNAL or
// UNKNOWN), and a ReadRows answer must be a valid chunk stream.
func FuzzRequests(f *testing.F) {
	name := meta.TableID{Instance: "i", Table: "t"}.FullName("p")
	seed := func(kind byte, m proto.Message) {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(kind, true, b)
	}
	set := &bigtablepb.Mutation{Mutation: &bigtablepb.Mutation_SetCell_{SetCell: &bigtablepb.Mutation_SetCell{
		FamilyName: "f", ColumnQualifier: []byte("q"), TimestampMicros: 2000, Value: []byte("v")}}}
	seed(0, &bigtablepb.ReadRowsRequest{Rows: &bigtablepb.RowSet{RowKeys: [][]byte{[]byte("a")}},
		Filter: &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_ValueRegexFilter{ValueRegexFilter: []byte("v.*")}}, RowsLimit: 2, Reversed: true})
	seed(1, &bigtablepb.MutateRowRequest{RowKey: []byte("b"), Mutations: []*bigtablepb.Mutation{set}})
	seed(2, &bigtablepb.MutateRowsRequest{Entries: []*bigtablepb.MutateRowsRequest_Entry{{RowKey: []byte("c"), Mutations: []*bigtablepb.Mutation{set}}}})
	seed(3, &bigtablepb.CheckAndMutateRowRequest{RowKey: []byte("a"), TrueMutations: []*bigtablepb.Mutation{set},
		PredicateFilter: &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_FamilyNameRegexFilter{FamilyNameRegexFilter: "f"}}})
	seed(4, &bigtablepb.ReadModifyWriteRowRequest{RowKey: []byte("a"), Rules: []*bigtablepb.ReadModifyWriteRule{{FamilyName: "f",
		ColumnQualifier: []byte("n"), Rule: &bigtablepb.ReadModifyWriteRule_IncrementAmount{IncrementAmount: 1}}}})
	seed(5, &bigtablepb.SampleRowKeysRequest{})
	f.Add(byte(0), false, []byte{0x0a, 0x03, 'b', 'a', 'd'})

	ctx := context.Background()
	host, err := NewHost(ctx, HostOptions{Store: blob.NewMemory(), Logger: quietLogger()})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { host.Close() })
	tm := meta.Table{ID: meta.TableID{Instance: "i", Table: "t"}, Families: map[string]tabletdesc.Family{"f": {}},
		Granularity: meta.GranularityMicros, Tablets: []meta.TabletRef{{ID: "t0", End: []byte("m")}, {ID: "t1", Start: []byte("m")}}}
	if err := host.OpenTable(ctx, tm); err != nil {
		f.Fatal(err)
	}
	ds := NewDataService(host, DataOptions{ChunkBytes: 4})
	if _, err := ds.MutateRow(ctx, &bigtablepb.MutateRowRequest{TableName: name, RowKey: []byte("a"), Mutations: []*bigtablepb.Mutation{set}}); err != nil {
		f.Fatal(err)
	}

	f.Fuzz(func(t *testing.T, kind byte, fixName bool, data []byte) {
		var err error
		switch kind % 6 {
		case 0:
			req := &bigtablepb.ReadRowsRequest{}
			if proto.Unmarshal(data, req) != nil {
				return
			}
			if fixName {
				req.TableName = name
			}
			st := &fakeStream[bigtablepb.ReadRowsResponse]{ctx: ctx}
			if err = ds.ReadRows(req, st); err == nil {
				checkChunks(t, st.sent, req.GetReversed())
			}
		case 1:
			req := &bigtablepb.MutateRowRequest{}
			if proto.Unmarshal(data, req) != nil {
				return
			}
			if fixName {
				req.TableName = name
			}
			_, err = ds.MutateRow(ctx, req)
		case 2:
			req := &bigtablepb.MutateRowsRequest{}
			if proto.Unmarshal(data, req) != nil {
				return
			}
			if fixName {
				req.TableName = name
			}
			st := &fakeStream[bigtablepb.MutateRowsResponse]{ctx: ctx}
			if err = ds.MutateRows(req, st); err == nil {
				if len(st.sent) != 1 || len(st.sent[0].Entries) != len(req.Entries) {
					t.Fatalf("MutateRows answered %d responses for %d entries", len(st.sent), len(req.Entries))
				}
				for _, e := range st.sent[0].Entries {
					checkCode(t, status.ErrorProto(e.Status))
				}
			}
		case 3:
			req := &bigtablepb.CheckAndMutateRowRequest{}
			if proto.Unmarshal(data, req) != nil {
				return
			}
			if fixName {
				req.TableName = name
			}
			_, err = ds.CheckAndMutateRow(ctx, req)
		case 4:
			req := &bigtablepb.ReadModifyWriteRowRequest{}
			if proto.Unmarshal(data, req) != nil {
				return
			}
			if fixName {
				req.TableName = name
			}
			_, err = ds.ReadModifyWriteRow(ctx, req)
		default:
			req := &bigtablepb.SampleRowKeysRequest{}
			if proto.Unmarshal(data, req) != nil {
				return
			}
			if fixName {
				req.TableName = name
			}
			st := &fakeStream[bigtablepb.SampleRowKeysResponse]{ctx: ctx}
			if err = ds.SampleRowKeys(req, st); err == nil && (len(st.sent) == 0 || len(st.sent[len(st.sent)-1].RowKey) != 0) {
				t.Fatalf("SampleRowKeys did not end with the empty key: %v", st.sent)
			}
		}
		checkCode(t, err)
	})
}

// checkCode fails on errors that are not the request's fault.
func checkCode(t *testing.T, err error) {
	t.Helper()
	switch status.Code(err) {
	case codes.OK, codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.OutOfRange:
	default:
		t.Fatalf("error not blaming the request: %v", err)
	}
}

// checkChunks verifies a ReadRows answer the way the client's chunk reader
// does: rows strictly ordered, each row's first chunk with key, family and
// qualifier, split values whole, every row committed within its response.
func checkChunks(t *testing.T, resps []*bigtablepb.ReadRowsResponse, reversed bool) {
	t.Helper()
	var last []byte
	seen := false
	for _, r := range resps {
		inRow, inCell := false, false
		for _, ch := range r.Chunks {
			if !inRow {
				if ch.RowKey == nil || ch.FamilyName == nil || ch.Qualifier == nil {
					t.Fatalf("row starts without key, family or qualifier: %v", ch)
				}
				if seen {
					c := bytes.Compare(ch.RowKey, last)
					if (!reversed && c <= 0) || (reversed && c >= 0) {
						t.Fatalf("row %q after %q (reversed %v)", ch.RowKey, last, reversed)
					}
				}
				last, seen, inRow = ch.RowKey, true, true
			} else if inCell && (ch.RowKey != nil || ch.FamilyName != nil || ch.Qualifier != nil || ch.TimestampMicros != 0) {
				t.Fatalf("cell continuation with key fields: %v", ch)
			}
			inCell = ch.ValueSize > 0
			if ch.GetCommitRow() {
				if inCell {
					t.Fatal("row committed inside a split cell")
				}
				inRow = false
			}
		}
		if inRow {
			t.Fatal("a row spans two responses")
		}
	}
}
