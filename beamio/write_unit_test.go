package beamio

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/client"
	"github.com/tabuladb/tabula/storage/tabletserver/tabletpb"
)

func notServing() error {
	st := status.New(codes.FailedPrecondition, "tablet t-1 not served here")
	d, _ := anypb.New(&tabletpb.NotServing{TabletId: "t-1"})
	p := st.Proto()
	p.Details = append(p.Details, d)
	return status.ErrorProto(p)
}

func TestTransient(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{status.Error(codes.Unavailable, "x"), true},
		{status.Error(codes.DeadlineExceeded, "x"), true},
		{status.Error(codes.Aborted, "x"), true},
		{status.Error(codes.ResourceExhausted, "x"), true},
		{notServing(), true},
		{context.DeadlineExceeded, true},
		{status.Error(codes.FailedPrecondition, "x"), false},
		{status.Error(codes.InvalidArgument, "x"), false},
		{status.Error(codes.NotFound, "x"), false},
		{status.Error(codes.PermissionDenied, "x"), false},
		{status.Error(codes.Internal, "x"), false},
		{context.Canceled, false},
		{errors.New("plain"), false},
	} {
		if got := Transient(tc.err); got != tc.want {
			t.Errorf("Transient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// scriptedApplier answers ApplyBulk from a script of per-row outcomes:
// outcomes[row] is consumed one per attempt of that row.
type scriptedApplier struct {
	mu       sync.Mutex
	outcomes map[string][]error
	calls    [][]string
}

func (a *scriptedApplier) ApplyBulk(_ context.Context, _ string, rms []cell.RowMutation, _ client.BulkOptions) ([]error, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	errs := make([]error, len(rms))
	var rows []string
	failed := 0
	for i, rm := range rms {
		rows = append(rows, string(rm.Row))
		if q := a.outcomes[string(rm.Row)]; len(q) > 0 {
			errs[i] = q[0]
			a.outcomes[string(rm.Row)] = q[1:]
		}
		if errs[i] != nil {
			failed++
		}
	}
	a.calls = append(a.calls, rows)
	if failed == 0 {
		return nil, nil
	}
	return errs, errors.New("some failed")
}

func rmRows(keys ...string) []cell.RowMutation {
	var out []cell.RowMutation
	for _, k := range keys {
		out = append(out, cell.RowMutation{Row: []byte(k), Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1000, []byte("v"))}})
	}
	return out
}

func TestApplyWithRetries(t *testing.T) {
	cfg := WriteConfig{Table: Table{Addr: "x", Table: "t"}, RetryBackoff: time.Millisecond}
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	unavailable := status.Error(codes.Unavailable, "server gone")
	invalid := status.Error(codes.InvalidArgument, "entries[1].mutations[0].set_cell.family_name: unknown")
	a := &scriptedApplier{outcomes: map[string][]error{
		"b": {unavailable, notServing()}, // transient twice, then applied
		"c": {invalid},                   // permanent
	}}
	out := applyWithRetries(context.Background(), a, cfg, rmRows("a", "b", "c", "d"))
	if out.err != nil {
		t.Fatal(out.err)
	}
	if out.written != 3 || len(out.failed) != 1 || out.requests != 3 || out.retries != 2 {
		t.Fatalf("outcome %+v, want 3 written, 1 failed, 3 requests, 2 retries", out)
	}
	if f := out.failed[0]; string(f.Mutation.Row) != "c" || codes.Code(f.Code) != codes.InvalidArgument || !strings.Contains(f.Message, "family_name") {
		t.Fatalf("dead letter %v", f)
	}
	// Only the transient entry is re-sent.
	if len(a.calls) != 3 || len(a.calls[1]) != 1 || a.calls[1][0] != "b" || a.calls[2][0] != "b" {
		t.Fatalf("calls %v, want everything then b twice", a.calls)
	}

	// A transient failure that outlasts the attempts fails the batch.
	cfg.MaxAttempts = 3
	a = &scriptedApplier{outcomes: map[string][]error{"b": {unavailable, unavailable, unavailable, unavailable}}}
	out = applyWithRetries(context.Background(), a, cfg, rmRows("a", "b"))
	if out.err == nil || !strings.Contains(out.err.Error(), "after 3 attempts") || status.Code(errors.Unwrap(out.err)) != codes.Unavailable {
		t.Fatalf("err = %v, want the Unavailable after 3 attempts", out.err)
	}
	if out.written != 1 || len(a.calls) != 3 {
		t.Fatalf("written %d in %d calls, want 1 in 3", out.written, len(a.calls))
	}
}

func TestWriteConfigLimits(t *testing.T) {
	base := Table{Addr: "x", Table: "t"}
	for _, tc := range []struct {
		cfg  WriteConfig
		want string
	}{
		{WriteConfig{}, "address"},
		{WriteConfig{Table: Table{Addr: "x"}}, "table"},
		{WriteConfig{Table: base, BatchEntries: MaxBatchMutations + 1}, "BatchEntries"},
		{WriteConfig{Table: base, BatchBytes: MaxBatchBytes + 1}, "BatchBytes"},
		{WriteConfig{Table: base, BatchBytes: 1 << 20, MaxOutstandingBytes: 1 << 10}, "MaxOutstandingBytes"},
		{WriteConfig{Table: base, MaxAttempts: -1}, "MaxAttempts"},
	} {
		if _, err := tc.cfg.withDefaults(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want one naming %s", tc.cfg, err, tc.want)
		}
	}
}

// TestByteSemaphoreBounds checks that the bytes acquired never exceed
// the bound while many senders contend, and that an oversized request
// still gets through alone.
func TestByteSemaphoreBounds(t *testing.T) {
	s := newByteSemaphore(100)
	var mu sync.Mutex
	inUse, peak := int64(0), int64(0)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := int64(10 + i%50)
			if i == 25 {
				n = 500 // larger than the whole
			}
			if err := s.acquire(context.Background(), n); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			inUse += min(n, 100)
			peak = max(peak, inUse)
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			inUse -= min(n, 100)
			mu.Unlock()
			s.release(n)
		}()
	}
	wg.Wait()
	if peak > 100 || peak == 0 {
		t.Fatalf("peak %d bytes in use, want in (0, 100]", peak)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.acquire(ctx, 100); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := s.acquire(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire on a full semaphore with a cancelled context: %v", err)
	}
}
