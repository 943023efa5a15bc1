package gateway

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/tabuladb/tabula/storage/tabletserver"
)

// withoutPointReads makes newGWNode start a node without the point-read
// service (an owner running an older version).
var withoutPointReads bool

// TestGatewayPointReadsShareOneStream: point reads of rows B owns, sent
// to A by 16 concurrent readers, all travel over A's one stream to B and
// each returns its own row.
func TestGatewayPointReadsShareOneStream(t *testing.T) {
	c := newGWCluster(t)
	gwFill(t, c)
	inB := []string{"n", "p", "r", "t"}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range 25 {
				key := inB[rng.IntN(len(inB))]
				row, err := c.tbl.ReadRow(c.ctx, key)
				if err != nil {
					errs <- err
					return
				}
				if got, want := formatRow(row), fmt.Sprintf("%s{f:c@1000=v-%s}", key, key); got != want {
					errs <- fmt.Errorf("ReadRow %s: got %s, want %s", key, got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	pr := c.a.gw.pointReads(c.b.addr)
	if n := pr.calls.Load(); n != 16*25 {
		t.Errorf("%d calls over the stream to B, want %d", n, 16*25)
	}
	pr.mu.Lock()
	open, pending := pr.st != nil, len(pr.pending)
	pr.mu.Unlock()
	if !open || pending != 0 {
		t.Errorf("stream open %v, %d calls pending after all returned", open, pending)
	}
	// A row B does not have, and a row list across both owners.
	if row, err := c.tbl.ReadRow(c.ctx, "q"); err != nil || row != nil {
		t.Errorf("ReadRow q: %v, %v; want no row", row, err)
	}
	if got, want := gwKeys(t, c.ctx, c.tbl, bigtable.RowList{"t", "a", "p", "zz"}), "a p t"; got != want {
		t.Errorf("row list: got %q, want %q", got, want)
	}
}

// TestGatewayPointReadsLastFrame: an entry that asks for frameLast gets a
// point read's row and its end in one frame; one that does not (an older
// version) gets them as two; both read the same rows.
func TestGatewayPointReadsLastFrame(t *testing.T) {
	for _, tc := range []struct {
		name         string
		separateEnd  bool
		singleFrames int64 // per single-row read of a row B has
	}{{"last", false, 1}, {"separate", true, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newGWCluster(t)
			gwFill(t, c)
			pr := c.a.gw.pointReads(c.b.addr)
			pr.separateEnd = tc.separateEnd
			inB := []string{"n", "p", "r", "t"}
			for _, key := range inB {
				row, err := c.tbl.ReadRow(c.ctx, key)
				if got, want := formatRow(row), fmt.Sprintf("%s{f:c@1000=v-%s}", key, key); err != nil || got != want {
					t.Fatalf("ReadRow %s: %s, %v; want %s", key, got, err, want)
				}
			}
			// A row B does not have: no response, the end alone.
			if row, err := c.tbl.ReadRow(c.ctx, "q"); err != nil || row != nil {
				t.Fatalf("ReadRow q: %v, %v; want no row", row, err)
			}
			if got, want := pr.frames.Load(), int64(len(inB))*tc.singleFrames+1; got != want {
				t.Errorf("%d frames for %d reads of B's rows and one of a missing row, want %d", got, len(inB), want)
			}
			if got, want := gwKeys(t, c.ctx, c.tbl, bigtable.RowList{"t", "n", "p", "zz"}), "n p t"; got != want {
				t.Errorf("row list: got %q, want %q", got, want)
			}
			pr.mu.Lock()
			pending := len(pr.pending)
			pr.mu.Unlock()
			if pending != 0 {
				t.Errorf("%d calls pending after all returned", pending)
			}
		})
	}
}

// TestGatewayPointReadsOwnerWithoutService: an owner without the service
// answers the stream UNIMPLEMENTED; the call and the next ones take
// streams of their own, and the stream is not asked for again at once.
func TestGatewayPointReadsOwnerWithoutService(t *testing.T) {
	c := newGWCluster(t)
	withoutPointReads = true
	d := newGWNode(t, c.ctx, c.loc, func(addr string) (grpc.ClientConnInterface, error) { return gwConn(t, addr), nil }, tabletserver.DataOptions{}, nil)
	withoutPointReads = false
	c.loc.high = d.name // D owns [m, "")
	for _, r := range []string{"n", "p"} {
		gwPut(t, c.ctx, c.tbl, r, "v-"+r)
	}
	for range 3 {
		for _, key := range []string{"n", "p"} {
			row, err := c.tbl.ReadRow(c.ctx, key)
			if err != nil || formatRow(row) != fmt.Sprintf("%s{f:c@1000=v-%s}", key, key) {
				t.Fatalf("ReadRow %s: %s, %v", key, formatRow(row), err)
			}
		}
	}
	if n := c.a.gw.pointReads(d.addr).calls.Load(); n != 1 {
		t.Errorf("%d calls tried over the stream to an owner without it, want 1", n)
	}
	if f := d.requests("ReadRows", routeLocal); f != 6 {
		t.Errorf("owner served %v ReadRows, want the 6 reads", f)
	}
}

// TestGatewayPointReadsDeadline: a call out of time ends with
// DEADLINE_EXCEEDED without disturbing the stream.
func TestGatewayPointReadsDeadline(t *testing.T) {
	c := newGWCluster(t)
	gwFill(t, c)
	ctx, cancel := context.WithTimeout(c.ctx, time.Nanosecond)
	defer cancel()
	time.Sleep(time.Millisecond)
	_, err := readPointCall(ctx, c.a.gw, "p")
	wantCode(t, err, codes.DeadlineExceeded)
	if got, err := readPointCall(c.ctx, c.a.gw, "p"); err != nil || !bytes.Contains(got, []byte("v-p")) {
		t.Fatalf("after a deadline: %q, %v", got, err)
	}
	if n := c.a.gw.pointReads(c.b.addr).calls.Load(); n != 1 {
		t.Errorf("%d calls over the stream, want 1 (the one in time)", n)
	}
}

// rawCapture is a ReadRows stream that keeps the bytes of the relayed
// responses.
type rawCapture struct {
	readRowsCapture
	got []byte
}

func (s *rawCapture) SendMsg(m any) error {
	e, ok := m.(*tabletserver.EncodedReadRows)
	if !ok {
		return fmt.Errorf("unexpected message %T", m)
	}
	s.got = append(s.got, e.Bytes()...)
	e.Release()
	return nil
}

// readPointCall reads row through g's ReadRows directly, returning the
// encoded responses.
func readPointCall(ctx context.Context, g *Gateway, row string) ([]byte, error) {
	s := &rawCapture{readRowsCapture: readRowsCapture{ctx: ctx}}
	err := g.ReadRows(&bigtablepb.ReadRowsRequest{TableName: tableName(gwTable), Rows: &bigtablepb.RowSet{RowKeys: [][]byte{[]byte(row)}}}, s)
	return s.got, err
}
