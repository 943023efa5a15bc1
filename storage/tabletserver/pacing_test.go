package tabletserver

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/tabuladb/tabula/storage/pacing"
)

// fakeServerStream is a grpc.ServerStream whose RecvMsg succeeds at once.
type fakeServerStream struct{ grpc.ServerStream }

func (fakeServerStream) Context() context.Context { return context.Background() }
func (fakeServerStream) RecvMsg(any) error        { return nil }

// TestInterceptorsMarkForegroundWork: a unary or server-streaming request
// makes the pacer busy while it runs; a bidirectional stream only at the
// messages it receives (an idle shared stream must not pace compactions
// for ever); the pacer's counters are exported.
func TestInterceptorsMarkForegroundWork(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Unix(1000, 0).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	p := pacing.New(pacing.Config{Quiet: 10 * time.Millisecond, Now: clock})
	e := newTestEnv(t, HostOptions{Pacer: p}, DataOptions{})
	h := e.host

	if p.Busy() {
		t.Fatal("busy before any request")
	}
	var busyInside bool
	_, err := h.UnaryInterceptor()(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/google.bigtable.v2.Bigtable/MutateRow"},
		func(context.Context, any) (any, error) { busyInside = p.Busy(); return nil, nil })
	if err != nil || !busyInside {
		t.Fatalf("unary request: busy inside %v, err %v", busyInside, err)
	}
	now.Add(int64(20 * time.Millisecond))
	if p.Busy() {
		t.Fatal("busy 20 ms after the only request ended (quiet 10 ms)")
	}

	busyInside = false
	err = h.StreamInterceptor()(nil, fakeServerStream{}, &grpc.StreamServerInfo{FullMethod: "/google.bigtable.v2.Bigtable/ReadRows", IsServerStream: true},
		func(any, grpc.ServerStream) error { busyInside = p.Busy(); return nil })
	if err != nil || !busyInside {
		t.Fatalf("server-streaming request: busy inside %v, err %v", busyInside, err)
	}
	now.Add(int64(20 * time.Millisecond))

	var before, after bool
	err = h.StreamInterceptor()(nil, fakeServerStream{}, &grpc.StreamServerInfo{FullMethod: "/tabula.gateway.v1.PointReads/Read", IsServerStream: true, IsClientStream: true},
		func(_ any, ss grpc.ServerStream) error {
			before = p.Busy()
			if err := ss.RecvMsg(nil); err != nil {
				return err
			}
			after = p.Busy()
			return nil
		})
	if err != nil || before || !after {
		t.Fatalf("bidirectional stream: busy before a message %v (want false), after one %v (want true), err %v", before, after, err)
	}

	checkExported(t, e, "tabula_background_write_bytes_total", "tabula_background_paced_seconds_total")
}
