package cluster

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type flagLease struct{ valid atomic.Bool }

func (l *flagLease) Valid() bool { return l.valid.Load() }

// The lease fence admits requests only while the lease is valid, and
// refuses the others with UNAVAILABLE without running them.
func TestLeaseFenceRefusesOnceLapsed(t *testing.T) {
	lease := &flagLease{}
	lease.valid.Store(true)
	unary, stream := leaseFence(lease)
	ran := 0
	handler := func(context.Context, any) (any, error) { ran++; return "ok", nil }
	sh := func(any, grpc.ServerStream) error { ran++; return nil }
	if resp, err := unary(context.Background(), nil, &grpc.UnaryServerInfo{}, handler); err != nil || resp != "ok" {
		t.Fatalf("valid lease: %v, %v", resp, err)
	}
	if err := stream(nil, nil, &grpc.StreamServerInfo{}, sh); err != nil {
		t.Fatalf("valid lease, stream: %v", err)
	}
	lease.valid.Store(false)
	if _, err := unary(context.Background(), nil, &grpc.UnaryServerInfo{}, handler); status.Code(err) != codes.Unavailable {
		t.Fatalf("lapsed lease: %v, want UNAVAILABLE", err)
	}
	if err := stream(nil, nil, &grpc.StreamServerInfo{}, sh); status.Code(err) != codes.Unavailable {
		t.Fatalf("lapsed lease, stream: %v, want UNAVAILABLE", err)
	}
	if ran != 2 {
		t.Fatalf("handlers ran %d times, want 2 (only while the lease was valid)", ran)
	}
}

// refused tells an address nothing listens at from one where a server
// listens (however slow it is to answer).
func TestRefused(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	if refused(context.Background(), addr) {
		t.Fatal("refused while a listener (that never accepts) is there")
	}
	_ = lis.Close()
	if !refused(context.Background(), addr) {
		t.Fatal("not refused once the listener closed")
	}
}
