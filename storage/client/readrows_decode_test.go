package client

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tabuladb/tabula/storage/cell"
)

// randomRows is a stream of ReadRowsResponses as a server sends them:
// rows of cells, families and qualifiers sent when they change, values
// split over chunks, labels, a reset row, last_scanned_row_key, and
// fields this client does not know; and the rows it holds, as the
// generator made them.
func randomRows(r *rand.Rand) ([]*bigtablepb.ReadRowsResponse, []cell.Row) {
	var out []*bigtablepb.ReadRowsResponse
	var rows []cell.Row
	resp := &bigtablepb.ReadRowsResponse{}
	for row := range 1 + r.IntN(20) {
		key := []byte(fmt.Sprintf("row%05d", row))
		reset := r.IntN(8) == 0
		for pass := 0; pass < 1+boolInt(reset); pass++ {
			cells := 1 + r.IntN(5)
			fam, qual := "", ""
			kept := cell.Row{Key: key}
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
				kept.Cells = append(kept.Cells, cell.Cell{Family: f, Qualifier: []byte(q), Timestamp: ch.TimestampMicros, Value: v})
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
			if !reset || pass == 1 {
				rows = append(rows, kept)
			}
		}
	}
	resp.LastScannedRowKey = []byte("zzz")
	out = append(out, resp)
	return out, rows
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
		stream, _ := randomRows(r)
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
			if rows, err = b.addEncoded(buf, nil); err != nil {
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

// TestMergedRowsStayIntact: one merger decoding stream after stream (as
// a scan does, tablet after tablet) returns every row as it was sent,
// checked after all of them were decoded: rows share the merger's cell
// slabs, and no later row, reset row or stream may overwrite an earlier
// row's cells.
func TestMergedRowsStayIntact(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 1))
	var m chunkMerger
	var want, got []cell.Row
	for range 300 {
		stream, rows := randomRows(r)
		want = append(want, rows...)
		for _, resp := range stream {
			buf, err := proto.Marshal(resp)
			if err != nil {
				t.Fatal(err)
			}
			if got, err = m.addEncoded(buf, got); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.end(); err != nil {
			t.Fatal(err)
		}
		m.reset()
	}
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d", len(got), len(want))
	}
	for i := range want {
		if !sameRow(got[i], want[i]) {
			t.Fatalf("row %d:\n got %v\nwant %v", i, got[i], want[i])
		}
	}
}

// sameRow compares rows' contents (an empty value equals a nil one).
func sameRow(a, b cell.Row) bool {
	if string(a.Key) != string(b.Key) || len(a.Cells) != len(b.Cells) {
		return false
	}
	for i, c := range a.Cells {
		d := b.Cells[i]
		if c.Family != d.Family || string(c.Qualifier) != string(d.Qualifier) || c.Timestamp != d.Timestamp || string(c.Value) != string(d.Value) {
			return false
		}
	}
	return true
}

// TestAddEncodedMalformed: truncated or garbled responses are errors,
// never panics.
func TestAddEncodedMalformed(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	stream, _ := randomRows(r)
	resp := stream[0]
	buf, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	failed := 0
	for n := range len(buf) {
		var m chunkMerger
		if _, err := m.addEncoded(buf[:n], nil); err != nil {
			failed++
		}
		garbled := append([]byte(nil), buf...)
		garbled[r.IntN(len(garbled))] = byte(r.IntN(256))
		m.reset()
		_, _ = m.addEncoded(garbled, nil)
	}
	if failed == 0 {
		t.Fatal("no truncation of the response was refused")
	}
}

// TestMergerReusesBuffersBetweenRows: decoding each response into one
// reused buffer (and reusing the cells' slab) whenever the merger is
// between rows, as a scan with Options.ReuseScanBuffers does, yields
// every row exactly when each is copied before the next response — rows
// here span responses; and reusing mid-row instead would corrupt rows,
// so the guard is what keeps them whole.
func TestMergerReusesBuffersBetweenRows(t *testing.T) {
	for _, guarded := range []bool{true, false} {
		r := rand.New(rand.NewPCG(9, 3))
		corrupt := 0
		for range 300 {
			stream, want := randomRows(r)
			var m chunkMerger
			var spare []byte
			var got []cell.Row
			for _, resp := range stream {
				enc, err := proto.Marshal(resp)
				if err != nil {
					t.Fatal(err)
				}
				buf := enc
				if !guarded || m.betweenRows() {
					m.reuseSlab()
					if cap(spare) < len(enc) {
						spare = make([]byte, len(enc))
					}
					buf = spare[:len(enc)]
					copy(buf, enc)
					spare = buf
				}
				rows, err := m.addEncoded(buf, nil)
				if err != nil {
					t.Fatal(err)
				}
				for _, row := range rows {
					got = append(got, cloneRow(row))
				}
			}
			if err := m.end(); err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("guarded %v: %d rows, want %d", guarded, len(got), len(want))
			}
			for i := range want {
				if !sameRow(got[i], want[i]) {
					if guarded {
						t.Fatalf("row %d:\n got %v\nwant %v", i, got[i], want[i])
					}
					corrupt++
				}
			}
		}
		if !guarded && corrupt == 0 {
			t.Error("reusing buffers mid-row corrupted no row: the test does not exercise rows spanning responses")
		}
	}
}

// TestUnmarshalCopiesFramesIntoOwnBuffer checks the codec's copy of a
// response received in frames (as gRPC hands a ReadRowsResponse over:
// one buffer per HTTP/2 frame): the bytes in order, in a buffer of its
// own that the frames' reuse (gRPC pools them) does not change.
func TestUnmarshalCopiesFramesIntoOwnBuffer(t *testing.T) {
	for _, frames := range []int{0, 1, 2, 64, 200} {
		t.Run(fmt.Sprint(frames), func(t *testing.T) {
			var want []byte
			var data mem.BufferSlice
			for i := range frames {
				frame := make([]byte, 1+i%7*1000)
				for j := range frame {
					frame[j] = byte(i + j)
				}
				want = append(want, frame...)
				data = append(data, mem.SliceBuffer(frame))
			}
			var resp rawReadRows
			if err := (rawCodec{}).Unmarshal(data, &resp); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(resp.buf, want) || resp.buf == nil {
				t.Fatalf("got %d bytes, want the %d bytes of the frames in order", len(resp.buf), len(want))
			}
			for _, b := range data {
				clear(b.ReadOnlyData())
			}
			if !bytes.Equal(resp.buf, want) {
				t.Fatal("the response's bytes changed with the frames they were copied from")
			}
		})
	}
}
