package tabletserver

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/scripts"
	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletdesc"
	"github.com/tabuladb/tabula/storage/tabletserver/scriptpb"
)

// FuzzScriptRun feeds arbitrary RunRequests (source, range, filter bytes,
// limits) to the script service in process: the server must not panic,
// must answer OK or a status that blames the request or the script
// (never INTERNAL or UNKNOWN), and an OK run ends with exactly one
// message carrying the partial, which decodes.
func FuzzScriptRun(f *testing.F) {
	name := meta.TableID{Instance: "i", Table: "t"}.FullName("p")
	seed := func(m *scriptpb.RunRequest) {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(true, b)
	}
	rf, _ := proto.Marshal(&bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_FamilyNameRegexFilter{FamilyNameRegexFilter: "f"}})
	seed(&scriptpb.RunRequest{Source: "t: table sum of int;\nemit t <- len(input.cells);"})
	seed(&scriptpb.RunRequest{Source: "emit keep <- len(input.key) > 1;", Filter: rf, StartKey: []byte("a"), EndKey: []byte("n")})
	seed(&scriptpb.RunRequest{Source: "while (true) {}", Limits: &scriptpb.Limits{Steps: 100}, RowPrefix: []byte("b")})
	seed(&scriptpb.RunRequest{Source: "x: int = \"s\";"})
	f.Add(false, []byte{0x1a, 0x02, 'x', ';'})

	ctx := context.Background()
	host, err := NewHost(ctx, HostOptions{Store: blob.NewMemory(), Logger: quietLogger()})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { host.Close() })
	tm := meta.Table{ID: meta.TableID{Instance: "i", Table: "t"}, Families: map[string]tabletdesc.Family{"f": {}},
		Tablets: []meta.TabletRef{{ID: "t0", End: []byte("m")}, {ID: "t1", Start: []byte("m")}}}
	if err := host.OpenTable(ctx, tm); err != nil {
		f.Fatal(err)
	}
	ds := NewDataService(host, DataOptions{})
	for _, k := range []string{"a", "bb", "m", "zz"} {
		set := &bigtablepb.Mutation{Mutation: &bigtablepb.Mutation_SetCell_{SetCell: &bigtablepb.Mutation_SetCell{
			FamilyName: "f", ColumnQualifier: []byte("q"), TimestampMicros: 2000, Value: []byte("v" + k)}}}
		if _, err := ds.MutateRow(ctx, &bigtablepb.MutateRowRequest{TableName: name, RowKey: []byte(k), Mutations: []*bigtablepb.Mutation{set}}); err != nil {
			f.Fatal(err)
		}
	}
	// Small maxima: a fuzzed script cannot make one input slow.
	svc := NewScriptService(host, ScriptOptions{MaxLimits: scripts.Limits{Steps: 10_000, Memory: 1 << 20, Time: 200 * time.Millisecond, Depth: 100}, BatchBytes: 8})

	f.Fuzz(func(t *testing.T, fixName bool, data []byte) {
		req := &scriptpb.RunRequest{}
		if proto.Unmarshal(data, req) != nil {
			return
		}
		if fixName {
			req.TableName = name
		}
		stream := &fakeStream[scriptpb.RunResponse]{ctx: ctx}
		err := svc.Run(req, stream)
		switch status.Code(err) {
		case codes.Internal, codes.Unknown:
			t.Fatalf("Run(%v) = %v", req, err)
		case codes.OK:
		default:
			return
		}
		finals := 0
		for i, m := range stream.sent {
			if m.GetStats() == nil {
				continue
			}
			finals++
			if i != len(stream.sent)-1 {
				t.Fatalf("a final message at %d of %d", i, len(stream.sent))
			}
			prog, err := scripts.Compile("s", req.GetSource())
			if err != nil {
				t.Fatalf("the server ran a script that does not compile: %v", err)
			}
			if err := prog.NewPartial().UnmarshalBinary(m.GetPartial()); err != nil {
				t.Fatalf("partial does not decode: %v", err)
			}
		}
		if finals != 1 {
			t.Fatalf("%d final messages", finals)
		}
	})
}
