package tabletserver

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync/atomic"
	"testing"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc/mem"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/filter"
)

// TestEncodedResponsesMatchMessages: a chunkWriter writing wire bytes
// sends, response for response, the bytes the messages a chunkWriter
// builds otherwise encode to — rows of every shape (families and
// qualifiers changing or not, empty qualifiers and values, zero
// timestamps, labels, values split over chunks, values aliased), rows
// filtered out (last_scanned_row_key), request stats at the end.
func TestEncodedResponsesMatchMessages(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 11))
	for round := range 100 {
		chunkBytes, respBytes := 1+r.IntN(3000), 1+r.IntN(20000)
		var msgs, wire [][]byte
		a := newChunkWriter(chunkBytes, respBytes)
		a.send = func(resp *bigtablepb.ReadRowsResponse) error {
			b, err := MarshalReadRows(resp)
			if err != nil {
				return err
			}
			msgs = append(msgs, b.Materialize())
			return nil
		}
		b := newChunkWriter(chunkBytes, respBytes)
		b.raw = func(bs mem.BufferSlice) error {
			wire = append(wire, bs.Materialize())
			bs.Free()
			return nil
		}
		for i := range 1 + r.IntN(1000) {
			key := fmt.Appendf(nil, "row%06d", i)
			if r.IntN(3) == 0 {
				for _, w := range []*chunkWriter{a, b} {
					if err := w.skip(key); err != nil {
						t.Fatal(err)
					}
				}
				continue
			}
			cells := randomLabeledCells(r)
			for _, w := range []*chunkWriter{a, b} {
				if err := w.row(key, cells); err != nil {
					t.Fatal(err)
				}
			}
		}
		if r.IntN(2) == 0 {
			stats := &bigtablepb.RequestStats{StatsView: &bigtablepb.RequestStats_FullReadStatsView{FullReadStatsView: &bigtablepb.FullReadStatsView{
				ReadIterationStats: &bigtablepb.ReadIterationStats{RowsSeenCount: r.Int64N(100)}}}}
			a.stats, b.stats = stats, stats
		}
		for _, w := range []*chunkWriter{a, b} {
			if err := w.flush(); err != nil {
				t.Fatal(err)
			}
		}
		if len(msgs) == 0 || len(msgs) != len(wire) {
			t.Fatalf("round %d: %d responses as messages, %d in wire form", round, len(msgs), len(wire))
		}
		for i := range msgs {
			if !bytes.Equal(msgs[i], wire[i]) {
				t.Fatalf("round %d: response %d differs:\nmessages % x\nwire     % x", round, i, msgs[i], wire[i])
			}
		}
		if a.total != b.total {
			t.Fatalf("round %d: %d bytes counted from messages, %d from wire", round, a.total, b.total)
		}
	}
}

// TestResponsesGrowToResponseBytes: a scan's first response holds about
// firstResponseBytes, each next one twice the last, up to respBytes —
// in both forms — so that a stream's first rows reach the client after a
// sixteenth of a full response's scan.
func TestResponsesGrowToResponseBytes(t *testing.T) {
	const respBytes, rowBytes = 1 << 20, 1000
	value := bytes.Repeat([]byte{'v'}, rowBytes)
	var sizes [2][]int
	msg := newChunkWriter(DefaultChunkBytes, respBytes)
	msg.send = func(resp *bigtablepb.ReadRowsResponse) error {
		b, err := MarshalReadRows(resp)
		if err != nil {
			return err
		}
		sizes[0] = append(sizes[0], b.Len())
		b.Free()
		return nil
	}
	wire := newChunkWriter(DefaultChunkBytes, respBytes)
	wire.raw = func(bs mem.BufferSlice) error {
		sizes[1] = append(sizes[1], bs.Len())
		bs.Free()
		return nil
	}
	for i := range 10_000 {
		for _, w := range []*chunkWriter{msg, wire} {
			if err := w.row(fmt.Appendf(nil, "row%06d", i), []filter.LabeledCell{{Cell: cell.Cell{Family: "f", Value: value}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for form, got := range sizes {
		want := firstResponseBytes
		for i, n := range got {
			// A response goes out at the row that takes its accounted
			// size (cells and a per-chunk allowance for the encoding)
			// to the limit: about want bytes, one row's more at most.
			if n < want*9/10 || n > want+2*rowBytes {
				t.Fatalf("form %d, response %d: %d bytes, want %d (+ a row)", form, i, n, want)
			}
			want = min(2*want, respBytes)
		}
		if len(got) < 8 {
			t.Fatalf("form %d: %d responses for 10 MB of rows: %v", form, len(got), got)
		}
	}
}

func randomLabeledCells(r *rand.Rand) []filter.LabeledCell {
	var cells []filter.LabeledCell
	for range 1 + r.IntN(6) {
		c := filter.LabeledCell{Cell: cell.Cell{
			Family:    []string{"f", "g", "family"}[r.IntN(3)],
			Qualifier: [][]byte{nil, []byte("q"), []byte("qual")}[r.IntN(3)],
			Timestamp: []int64{0, 1, 1_000_000, r.Int64N(1 << 50)}[r.IntN(4)],
		}}
		switch r.IntN(8) {
		case 0:
		case 1:
			c.Value = bytes.Repeat([]byte{byte(r.IntN(256))}, valueAliasBytes+r.IntN(5000))
		default:
			c.Value = bytes.Repeat([]byte{byte(r.IntN(256))}, r.IntN(2000))
		}
		if r.IntN(5) == 0 {
			c.Labels = []string{"l", "label"}[:1+r.IntN(2)]
		}
		cells = append(cells, c)
	}
	return cells
}

// TestRawSenderOnlyForGRPCStreams: responses go out in wire form only on
// the stream gRPC's generated handler makes, never on an in-process one
// (the gateway's, a test's), whose receivers read the messages.
func TestRawSenderOnlyForGRPCStreams(t *testing.T) {
	if grpcReadRowsStream == nil {
		t.Fatal("the generated ReadRows stream type was not found")
	}
	if rawSender(&fakeStream[bigtablepb.ReadRowsResponse]{}) != nil {
		t.Fatal("an in-process stream was given the wire form")
	}
	if got := grpcReadRowsStream.String(); got == reflect.TypeOf(&fakeStream[bigtablepb.ReadRowsResponse]{}).String() {
		t.Fatalf("probe found %s", got)
	}
}

// countingPool is the responses' buffer pool, counting the buffers it
// hands out and takes back.
type countingPool struct {
	inner     mem.BufferPool
	gets, put atomic.Int64
}

func (p *countingPool) Get(n int) *[]byte { p.gets.Add(1); return p.inner.Get(n) }
func (p *countingPool) Put(b *[]byte)     { p.put.Add(1); p.inner.Put(b) }

// TestResponseBuffersGoBackToThePool: every pooled buffer a response was
// encoded in goes back to the pool once its spans are freed, also when
// values of valueAliasBytes or more were aliased between them — through
// the scan's chunk writer and through encodeReadRows.
func TestResponseBuffersGoBackToThePool(t *testing.T) {
	pool := &countingPool{inner: responsePool}
	was := headerPool
	headerPool = func() mem.BufferPool { return pool }
	defer func() { headerPool = was }()
	r := rand.New(rand.NewPCG(5, 8))
	var held []mem.BufferSlice // freed at the end, as gRPC does once sent
	aliased := 0
	w := newChunkWriter(1<<20, 256<<10)
	w.raw = func(bs mem.BufferSlice) error {
		if len(bs) > 1 {
			aliased++
		}
		held = append(held, bs)
		return nil
	}
	var msgs []*bigtablepb.ReadRowsResponse
	for i := range 300 {
		key := fmt.Appendf(nil, "row%06d", i)
		cells := randomLabeledCells(r)
		if err := w.row(key, cells); err != nil {
			t.Fatal(err)
		}
		m := &bigtablepb.ReadRowsResponse{}
		for _, c := range cells {
			m.Chunks = append(m.Chunks, &bigtablepb.ReadRowsResponse_CellChunk{RowKey: key, Value: c.Value})
		}
		msgs = append(msgs, m)
	}
	if err := w.flush(); err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		bs, err := encodeReadRows(m)
		if err != nil {
			t.Fatal(err)
		}
		if len(bs) > 1 {
			aliased++
		}
		held = append(held, bs)
	}
	if aliased == 0 {
		t.Fatal("no response aliased a value: the test needs some")
	}
	if pool.put.Load() >= pool.gets.Load() {
		t.Fatalf("%d buffers back in the pool of %d before gRPC freed them", pool.put.Load(), pool.gets.Load())
	}
	for _, bs := range held {
		bs.Free()
	}
	if g, p := pool.gets.Load(), pool.put.Load(); g != p || g == 0 {
		t.Fatalf("%d buffers taken from the pool, %d back after every response was freed (%d responses aliased values)", g, p, aliased)
	}
}
