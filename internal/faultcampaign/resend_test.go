package faultcampaign

import (
	"context"
	"errors"
	"math"
	"net"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/cluster/clusterpb"
)

// TestResentDeleteIsTwoOperations: the history of the CI run that found it
// (a fault campaign, 2026-11-26) — the official client's delete was
// applied, its answer lost, the client resent it after another client's
// put, and it was applied again; the second attempt's answer was OK. As
// one acknowledged delete the history is illegal; with the first attempt as
// an operation of unknown outcome beside it, it is linearizable.
func TestResentDeleteIsTwoOperations(t *testing.T) {
	del := Input{Kind: OpDelete}
	history := []porcupine.Operation{
		op(0, 0, 10, Input{Kind: OpPut, Value: "x"}, Output{}),
		op(1, 20, 100, del, Output{}), // sent at 20, answered OK at 100
		op(2, 30, 35, Input{Kind: OpRead}, Output{Read: RowState{}}),
		op(2, 40, 45, Input{Kind: OpPut, Value: "y"}, Output{}),
		op(2, 50, 55, Input{Kind: OpRead}, Output{Read: RowState{C: "y", D: "y"}}),
		op(2, 110, 115, Input{Kind: OpRead}, Output{Read: RowState{}}),
	}
	if r := check(t, history); r != porcupine.Illegal {
		t.Fatalf("one acknowledged delete applied twice: %v, want Illegal", r)
	}
	resent := append(history, op(3, 20, math.MaxInt64, del, Output{Unknown: true}))
	if r := check(t, resent); r != porcupine.Ok {
		t.Fatalf("with the earlier attempt as an operation of unknown outcome: %v, want Ok", r)
	}
}

// resendingClient answers every operation OK after sending each write
// twice, as the official client does after an UNAVAILABLE.
type resendingClient struct{}

func (resendingClient) Name() string { return "resending" }

func (resendingClient) Do(ctx context.Context, row string, in Input) (Output, error) {
	sends := 1
	if in.Kind.IsWrite() {
		sends = 2
	}
	for range sends {
		_ = CountAttempts(ctx, "/google.bigtable.v2.Bigtable/MutateRow", nil, nil, nil,
			func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil })
	}
	return Output{}, nil
}

func (resendingClient) Scan(context.Context, string, string) (map[string]RowState, error) {
	return map[string]RowState{}, nil
}

// TestWorkerRecordsResentAttempts: a write the client sent twice is
// recorded as its answer plus one operation of unknown outcome from the
// same call, on a porcupine client of its own; a read sent once is not.
func TestWorkerRecordsResentAttempts(t *testing.T) {
	h := NewHistory(time.Now())
	w := &Worker{Client: resendingClient{}, Rows: []string{"r"}, History: h, Timeout: time.Second, Seed: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	w.Run(ctx)
	writes, unknown, reads := 0, 0, 0
	clients := map[int]bool{}
	for _, e := range h.Events() {
		switch {
		case e.Out.Unknown:
			unknown++
			if clients[e.Client] {
				t.Fatalf("two operations of unknown outcome on porcupine client %d", e.Client)
			}
			clients[e.Client] = true
		case e.In.Kind.IsWrite():
			writes++
		case e.In.Kind == OpRead && e.Scan == 0:
			reads++
		}
	}
	if writes == 0 || reads == 0 || unknown != writes {
		t.Fatalf("%d writes answered, %d reads, %d operations of unknown outcome: want one per write", writes, reads, unknown)
	}
}

// TestCountAttemptsSkipsRefused: an attempt the server refused before it
// could apply anything ("not serving") is not an operation of unknown
// outcome; one that failed leaving it open (a lease lapsed after the
// write) is; the last attempt speaks for itself either way.
func TestCountAttemptsSkipsRefused(t *testing.T) {
	notServing := status.Error(codes.Unavailable, "tablet t1 not serving on this server")
	mayHave := status.Error(codes.Unavailable, "tablet server lease lapsed before the write was acknowledged; it may have been applied")
	// An UNAVAILABLE whose call got no transport stream (no peer) was not
	// sent; the same error after the call reached a server may have
	// applied the write.
	noConn := status.Error(codes.Unavailable, "connection error: desc = \"transport: failed to connect\"")
	// lookup is a call that is not an attempt of the write: Tabula's
	// client asking for the root's location (GetRoot) as it locates the
	// row's tablet, answered OK.
	lookup := errors.New("GetRoot, answered OK")
	sent := map[error]bool{mayHave: true, notServing: true}
	for _, tc := range []struct {
		name    string
		answers []error // of the calls, in order
		want    int
	}{
		{"located, then once", []error{lookup, nil}, 0},
		{"open, located again, OK", []error{mayHave, lookup, lookup, nil}, 1},
		{"once", []error{nil}, 0},
		{"refused, then OK", []error{notServing, notServing, nil}, 0},
		{"open, then OK", []error{mayHave, nil}, 1},
		{"open, refused, open", []error{mayHave, notServing, mayHave}, 1},
		{"refused last", []error{mayHave, mayHave, notServing}, 2},
		{"unsent, then OK", []error{noConn, noConn, nil}, 0},
		{"unsent, open, OK", []error{noConn, mayHave, nil}, 1},
	} {
		ctx, log := withAttemptCounter(context.Background())
		for _, answer := range tc.answers {
			method := "/google.bigtable.v2.Bigtable/MutateRow"
			if answer == lookup {
				method, answer = clusterpb.Locator_GetRoot_FullMethodName, nil
			}
			_ = CountAttempts(ctx, method, nil, nil, nil,
				func(_ context.Context, _ string, _, _ any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
					if answer == nil || sent[answer] {
						for _, o := range opts {
							if p, ok := o.(grpc.PeerCallOption); ok {
								p.PeerAddr.Addr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
							}
						}
					}
					return answer
				})
		}
		if got := log.earlierOpen(); got != tc.want {
			t.Errorf("%s: %d earlier attempts that may have applied, want %d", tc.name, got, tc.want)
		}
	}
}
