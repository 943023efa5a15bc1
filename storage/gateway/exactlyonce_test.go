package gateway

import (
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/tabletserver"
)

// lossyConn delivers a forwarded call to its server and then, while lose
// is positive, throws the answer away and reports UNAVAILABLE: the owner
// applied the request and only its response was lost (a connection cut
// after the write) — the case where a resend would apply it twice.
type lossyConn struct {
	grpc.ClientConnInterface
	lose      *atomic.Int32
	delivered *atomic.Int32
}

func (c lossyConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	err := c.ClientConnInterface.Invoke(ctx, method, args, reply, opts...)
	c.delivered.Add(1)
	if err == nil && c.lose.Add(-1) >= 0 {
		return status.Error(codes.Unavailable, "connection reset after the request was sent (response lost)")
	}
	return err
}

// lossyGWCluster is A and B of the gateway tests with A's forwarded calls
// going through lossyConn; the official client talks to A, B owns row "w".
func lossyGWCluster(t *testing.T) (ctx context.Context, tbl *bigtable.Table, b *gwNode, lose, delivered *atomic.Int32) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	lose, delivered = new(atomic.Int32), new(atomic.Int32)
	var mu sync.Mutex
	conns := map[string]*grpc.ClientConn{}
	t.Cleanup(func() {
		for _, cc := range conns {
			cc.Close()
		}
	})
	dial := func(addr string) (grpc.ClientConnInterface, error) {
		mu.Lock()
		defer mu.Unlock()
		cc, ok := conns[addr]
		if !ok {
			var err error
			if cc, err = grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
				return nil, err
			}
			conns[addr] = cc
		}
		return lossyConn{ClientConnInterface: cc, lose: lose, delivered: delivered}, nil
	}
	loc := &fakeLocator{}
	a := newGWNode(t, ctx, loc, dial, tabletserver.DataOptions{}, nil)
	b = newGWNode(t, ctx, loc, dial, tabletserver.DataOptions{}, nil)
	loc.low, loc.high = a.name, b.name
	return ctx, gwClient(t, ctx, a.addr).Open(gwTable), b, lose, delivered
}

// readCounter reads f:n of row through tbl (0 when missing).
func readCounter(t *testing.T, ctx context.Context, tbl *bigtable.Table, row string) int64 {
	t.Helper()
	r, err := tbl.ReadRow(ctx, row, bigtable.RowFilter(bigtable.LatestNFilter(1)))
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range r["f"] {
		if it.Column == "f:n" {
			return int64(binary.BigEndian.Uint64(it.Value))
		}
	}
	return 0
}

// TestGatewayExactlyOnceWhenResponseLost injects the double apply: the
// owner applies an increment (and a compare-and-set, and an AddToCell) but
// the forwarding gateway loses the answer. Before, the gateway took the
// UNAVAILABLE for a dead owner and resent, so the counter moved twice;
// now the caller gets UNAVAILABLE (an unknown outcome) and the write is
// applied exactly once.
func TestGatewayExactlyOnceWhenResponseLost(t *testing.T) {
	ctx, tbl, b, lose, delivered := lossyGWCluster(t)

	rmw := bigtable.NewReadModifyWrite()
	rmw.Increment("f", "n", 1)
	lose.Store(1)
	_, err := tbl.ApplyReadModifyWrite(ctx, "w", rmw)
	wantCode(t, err, codes.Unavailable, "response lost")
	if got := delivered.Load(); got != 1 {
		t.Errorf("increment delivered %d times to the owner, want 1", got)
	}
	if got := readCounter(t, ctx, tbl, "w"); got != 1 {
		t.Fatalf("counter after one increment whose answer was lost = %d, want 1", got)
	}
	// Without loss the next one answers 2: nothing stuck.
	if _, err := tbl.ApplyReadModifyWrite(ctx, "w", rmw); err != nil {
		t.Fatal(err)
	}
	if got := readCounter(t, ctx, tbl, "w"); got != 2 {
		t.Fatalf("counter = %d, want 2", got)
	}

	// Compare-and-set: "set v=1 if v is absent", answer lost. A resend
	// would find v present and answer "not matched" for a write that
	// did happen; the caller must see the unknown outcome instead.
	set := bigtable.NewMutation()
	set.Set("f", "v", ts(5), []byte("1"))
	cas := bigtable.NewCondMutation(bigtable.ChainFilters(bigtable.ColumnFilter("v"), bigtable.LatestNFilter(1)), nil, set)
	delivered.Store(0)
	lose.Store(1)
	err = tbl.Apply(ctx, "w", cas)
	wantCode(t, err, codes.Unavailable, "response lost")
	if got := delivered.Load(); got != 1 {
		t.Errorf("conditional mutation delivered %d times, want 1", got)
	}

	// An AddToCell MutateRow is not idempotent either.
	add := bigtable.NewMutation()
	add.AddIntToCell("agg", "sum", ts(1), 3)
	delivered.Store(0)
	lose.Store(1)
	_ = tbl.Apply(ctx, "w", add) // the family does not exist: the owner refuses; the point is the count
	if got := delivered.Load(); got != 1 {
		t.Errorf("AddToCell delivered %d times, want 1", got)
	}

	// An idempotent write whose answer was lost is resent (same cell, same
	// timestamp): availability is kept where it is safe.
	put := bigtable.NewMutation()
	put.Set("f", "c", ts(1), []byte("x"))
	delivered.Store(0)
	lose.Store(1)
	if err := tbl.Apply(ctx, "w", put); err != nil {
		t.Fatalf("idempotent write after a lost answer: %v", err)
	}
	if got := delivered.Load(); got < 2 {
		t.Errorf("idempotent write delivered %d times, want a resend", got)
	}
	if !b.has(t, ctx, "w") {
		t.Error("row w not on its owner B")
	}
}

// scriptedLease answers Valid from a script, then true once it is spent.
type scriptedLease struct {
	mu     sync.Mutex
	script []bool
}

func (l *scriptedLease) Valid() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.script) == 0 {
		return true
	}
	v := l.script[0]
	l.script = l.script[1:]
	return v
}

func (l *scriptedLease) play(script ...bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.script = script
}

// TestGatewayLocalUnackedWriteNotRetried is the double append a fault
// campaign found during a lock-service restart: the gateway's own server
// applied an append, its lease lapsed before the acknowledgement, and the
// gateway took the UNAVAILABLE for a dead owner and ran the append again
// on the same server. Now the caller gets the unknown outcome and the
// append is applied once; a write refused before it was applied is still
// retried.
func TestGatewayLocalUnackedWriteNotRetried(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	lease := &scriptedLease{}
	loc := &fakeLocator{}
	dial := func(addr string) (grpc.ClientConnInterface, error) {
		return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	a := newGWNode(t, ctx, loc, dial, tabletserver.DataOptions{}, lease)
	loc.low, loc.high = a.name, a.name
	tbl := gwClient(t, ctx, a.addr).Open(gwTable)

	rmw := bigtable.NewReadModifyWrite()
	rmw.Increment("f", "n", 1)
	lease.play(true, false) // valid before the apply, lapsed before the ack
	_, err := tbl.ApplyReadModifyWrite(ctx, "a", rmw)
	wantCode(t, err, codes.Unavailable, "may have been applied")
	if got := readCounter(t, ctx, tbl, "a"); got != 1 {
		t.Fatalf("counter after one increment whose lease lapsed before the ack = %d, want 1", got)
	}

	lease.play(false) // lapsed before the apply: nothing changed, retried
	if _, err := tbl.ApplyReadModifyWrite(ctx, "a", rmw); err != nil {
		t.Fatalf("increment refused before the apply was not retried: %v", err)
	}
	if got := readCounter(t, ctx, tbl, "a"); got != 2 {
		t.Fatalf("counter = %d, want 2", got)
	}

	// A conditional mutation is not idempotent either.
	set := bigtable.NewMutation()
	set.Set("f", "v", ts(5), []byte("1"))
	cas := bigtable.NewCondMutation(bigtable.ChainFilters(bigtable.ColumnFilter("v"), bigtable.LatestNFilter(1)), nil, set)
	lease.play(true, false)
	wantCode(t, tbl.Apply(ctx, "a", cas), codes.Unavailable, "may have been applied")
}
