package client

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tabuladb/tabula/storage/cell"
)

// randomRows is a stream of ReadRowsResponses as a server sends them:
// rows of cells, families and qualifiers sent when they change, values
// split over chunks, labels, a reset row, last_scanned_row_key, and
// fields this client does not know.
func randomRows(r *rand.Rand) []*bigtablepb.ReadRowsResponse {
	var out []*bigtablepb.ReadRowsResponse
	resp := &bigtablepb.ReadRowsResponse{}
	for row := range 1 + r.IntN(20) {
		key := []byte(fmt.Sprintf("row%05d", row))
		reset := r.IntN(8) == 0
		for pass := 0; pass < 1+boolInt(reset); pass++ {
			cells := 1 + r.IntN(5)
			fam, qual := "", ""
			for i := range cells {
				ch := &bigtablepb.ReadRowsResponse_CellChunk{TimestampMicros: r.Int64N(1e12)}
				if i == 0 {
					ch.RowKey = key
				}
				f, q := fmt.Sprintf("f%d", r.IntN(2)), fmt.Sprintf("q%d", r.IntN(3))
				if i == 0 || f != fam {
					ch.FamilyName, ch.Qualifier = wrapperspb.String(f), wrapperspb.Bytes([]byte(q))
				} else if q != qual {
					ch.Qualifier = wrapperspb.Bytes([]byte(q))
				}
				if r.IntN(4) == 0 {
					ch.Qualifier = wrapperspb.Bytes(nil) // an empty qualifier
					q = ""
				}
				fam, qual = f, q
				if r.IntN(5) == 0 {
					ch.Labels = []string{"l"}
				}
				v := make([]byte, r.IntN(3)*r.IntN(300))
				for j := range v {
					v[j] = byte(r.IntN(256))
				}
				pieces := 1 + r.IntN(3)
				if len(v) < pieces {
					pieces = 1
				}
				for p := range pieces {
					piece := ch
					if p > 0 {
						piece = &bigtablepb.ReadRowsResponse_CellChunk{}
					}
					lo, hi := p*len(v)/pieces, (p+1)*len(v)/pieces
					piece.Value = v[lo:hi]
					if p < pieces-1 {
						piece.ValueSize = int32(len(v))
					}
					last := p == pieces-1 && i == cells-1
					if last && reset && pass == 0 {
						piece.RowStatus = &bigtablepb.ReadRowsResponse_CellChunk_ResetRow{ResetRow: true}
					} else if last {
						piece.RowStatus = &bigtablepb.ReadRowsResponse_CellChunk_CommitRow{CommitRow: true}
					}
					resp.Chunks = append(resp.Chunks, piece)
					if r.IntN(6) == 0 {
						out = append(out, resp)
						resp = &bigtablepb.ReadRowsResponse{}
					}
				}
			}
		}
	}
	resp.LastScannedRowKey = []byte("zzz")
	out = append(out, resp)
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestAddEncodedMatchesAdd: decoding the wire bytes gives the rows that
// merging the generated messages' chunks gives, unknown fields and all.
func TestAddEncodedMatchesAdd(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	for i := range 500 {
		stream := randomRows(r)
		var a, b chunkMerger
		var want, got []cell.Row
		for _, resp := range stream {
			rows, err := a.add(resp.GetChunks())
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, rows...)
			buf, err := proto.Marshal(resp)
			if err != nil {
				t.Fatal(err)
			}
			// Field 99, a varint: from a newer server.
			buf = protowire.AppendVarint(protowire.AppendTag(buf, 99, protowire.VarintType), 7)
			if rows, err = b.addEncoded(buf); err != nil {
				t.Fatal(err)
			}
			got = append(got, rows...)
		}
		if a.end() != nil || b.end() != nil {
			t.Fatal("stream ended inside a row")
		}
		if len(want) == 0 || !reflect.DeepEqual(got, want) {
			t.Fatalf("stream %d: decoded %d rows, merged %d; differ:\n%v\n%v", i, len(got), len(want), got, want)
		}
	}
}

// TestAddEncodedMalformed: truncated or garbled responses are errors,
// never panics.
func TestAddEncodedMalformed(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	resp := randomRows(r)[0]
	buf, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	failed := 0
	for n := range len(buf) {
		var m chunkMerger
		if _, err := m.addEncoded(buf[:n]); err != nil {
			failed++
		}
		garbled := append([]byte(nil), buf...)
		garbled[r.IntN(len(garbled))] = byte(r.IntN(256))
		m.reset()
		_, _ = m.addEncoded(garbled)
	}
	if failed == 0 {
		t.Fatal("no truncation of the response was refused")
	}
}
