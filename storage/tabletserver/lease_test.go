package tabletserver

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc/codes"

	"github.com/tabuladb/tabula/storage/coord"
)

// A coord.Session is a Lease.
var _ Lease = coord.Session(nil)

// leaseWrites tries every write RPC through the official client, with
// server-assigned timestamps (the client does not retry those, so the
// first status is what it returns), and returns their errors by name.
func leaseWrites(ctx context.Context, tbl *bigtable.Table) map[string][]error {
	out := map[string][]error{}
	m := bigtable.NewMutation()
	m.Set("f", "c", bigtable.ServerTime, []byte("new"))
	out["MutateRow"] = []error{tbl.Apply(ctx, "a", m)}

	m1 := bigtable.NewMutation()
	m1.Set("f", "c", bigtable.ServerTime, []byte("new"))
	m2 := bigtable.NewMutation()
	m2.Set("f", "c", bigtable.ServerTime, []byte("new"))
	m3 := bigtable.NewMutation()
	m3.Set("f", "c", bigtable.ServerTime, []byte("new"))
	errs, err := tbl.ApplyBulk(ctx, []string{"a", "n", "z"}, []*bigtable.Mutation{m1, m2, m3})
	if err != nil {
		out["MutateRows"] = []error{err}
	} else if errs == nil {
		out["MutateRows"] = []error{nil, nil, nil}
	} else {
		out["MutateRows"] = errs
	}

	t := bigtable.NewMutation()
	t.Set("f", "c", bigtable.ServerTime, []byte("matched"))
	f := bigtable.NewMutation()
	f.Set("f", "c", bigtable.ServerTime, []byte("unmatched"))
	out["CheckAndMutateRow"] = []error{tbl.Apply(ctx, "n", bigtable.NewCondMutation(nil, t, f))}

	rmw := bigtable.NewReadModifyWrite()
	rmw.AppendValue("f", "c", []byte("+"))
	_, err = tbl.ApplyReadModifyWrite(ctx, "z", rmw)
	out["ReadModifyWriteRow"] = []error{err}
	return out
}

// TestLeaseCoordLapse serves writes under a real coord.Local session on a
// fake clock, lets the session lapse by moving the clock past its TTL, and
// checks that every write RPC is then refused with UNAVAILABLE and changes
// nothing, while reads still work.
func TestLeaseCoordLapse(t *testing.T) {
	clock := coord.NewFakeClock()
	svc := coord.NewLocal(coord.LocalConfig{Clock: clock, SessionTTL: 10 * time.Second})
	defer svc.Close()
	sess, err := svc.NewSession(context.Background(), coord.SessionOptions{Name: "tabletserver", ManualRenew: true})
	if err != nil {
		t.Fatal(err)
	}
	e := newTestEnv(t, HostOptions{Lease: sess}, DataOptions{})
	tbl := e.createTable(tableDef{name: "t", families: []string{"f"}, splits: []string{"m"}})

	// While the lease is valid, writes are served (renewing keeps it so).
	for i, row := range []string{"a", "n", "z"} {
		m := bigtable.NewMutation()
		m.Set("f", "c", ts(int64(i+1)), []byte("old"))
		if err := tbl.Apply(e.ctx, row, m); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(9 * time.Second)
	if err := sess.Renew(e.ctx); err != nil {
		t.Fatal(err)
	}
	clock.Advance(9 * time.Second)
	for name, errs := range leaseWrites(e.ctx, tbl) {
		for i, err := range errs {
			if err != nil {
				t.Fatalf("%s[%d] with a valid lease: %v", name, i, err)
			}
		}
	}
	if v := gaugeValue(t, e, "tabula_lease_valid"); v != 1 {
		t.Fatalf("lease gauge %v with a valid lease", v)
	}

	// Restore a known state, then let the lease lapse.
	for i, row := range []string{"a", "n", "z"} {
		m := bigtable.NewMutation()
		m.DeleteRow()
		m.Set("f", "c", ts(int64(i+1)), []byte("old"))
		if err := tbl.Apply(e.ctx, row, m); err != nil {
			t.Fatal(err)
		}
	}
	want := "a{f:c@1000=old} n{f:c@2000=old} z{f:c@3000=old}"
	if got := readAll(t, e.ctx, tbl, bigtable.InfiniteRange("")); got != want {
		t.Fatalf("before the lapse: %s", got)
	}
	clock.Advance(10 * time.Second)
	if sess.Valid() {
		t.Fatal("session still valid a TTL after its last renewal")
	}

	n := 0
	for name, errs := range leaseWrites(e.ctx, tbl) {
		for i, err := range errs {
			n++
			if err == nil {
				t.Fatalf("%s[%d] acknowledged after the lease lapsed", name, i)
			}
			wantCode(t, err, codes.Unavailable, "tablet server lease lapsed", "nothing changed")
		}
	}
	if n != 6 {
		t.Fatalf("%d write outcomes, want 6", n)
	}
	// An explicit-timestamp write is refused too (the client retries it
	// until its deadline, so only look at the data).
	ctx, cancel := context.WithTimeout(e.ctx, 200*time.Millisecond)
	m := bigtable.NewMutation()
	m.Set("f", "c", ts(9), []byte("retried"))
	if err := tbl.Apply(ctx, "b", m); err == nil {
		t.Fatal("explicit-timestamp write acknowledged after the lease lapsed")
	}
	cancel()
	// DropRowRange through the Host, as the admin API calls it.
	tm, err := e.host.tableMeta(e.tableMeta(tableDef{name: "t"}).ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.host.DropRowRange(e.ctx, tm, nil); !errors.Is(err, ErrLeaseLapsed) {
		t.Fatalf("DropRowRange after the lapse: %v, want ErrLeaseLapsed", err)
	}

	// Reads still work, and nothing changed.
	if got := readAll(t, e.ctx, tbl, bigtable.InfiniteRange("")); got != want {
		t.Fatalf("after refused writes: %s, want %s", got, want)
	}
	if r, err := tbl.ReadRow(e.ctx, "a"); err != nil || formatRow(r) != "a{f:c@1000=old}" {
		t.Fatalf("ReadRow after the lapse: %v %v", formatRow(r), err)
	}

	if v := gaugeValue(t, e, "tabula_lease_valid"); v != 0 {
		t.Fatalf("lease gauge %v after the lapse", v)
	}
	refused := counterValue(t, e.host.metrics.lease.refused.WithLabelValues("before_apply"))
	if refused < 8 { // 6 RPC entries, at least one attempt of b, DropRowRange
		t.Fatalf("refused writes counted %v, want at least 8", refused)
	}
	if v := counterValue(t, e.host.metrics.lease.refused.WithLabelValues("before_ack")); v != 0 {
		t.Fatalf("unacknowledged writes counted %v, want 0", v)
	}

	// Tablet states are fenced too: closing flushes nothing into them
	// (the tablets' next server replays the log instead).
	if err := e.host.Close(); !errors.Is(err, ErrLeaseLapsed) {
		t.Fatalf("Close after the lapse: %v, want ErrLeaseLapsed from the fenced state saves", err)
	}
}

// flipLease is valid for its first allow calls of Valid, then lapsed.
type flipLease struct {
	calls atomic.Int64
	allow atomic.Int64
}

func (l *flipLease) Valid() bool { return l.calls.Add(1) <= l.allow.Load() }

func (l *flipLease) set(allow int64) {
	l.calls.Store(0)
	l.allow.Store(allow)
}

// TestLeaseLapseBeforeAck: a lease that is valid when a write is applied
// but lapses before it is acknowledged yields UNAVAILABLE, not OK, though
// the write is durable (its outcome is unknown to the client).
func TestLeaseLapseBeforeAck(t *testing.T) {
	lease := &flipLease{}
	lease.set(1 << 40)
	e := newTestEnv(t, HostOptions{Lease: lease}, DataOptions{})
	tbl := e.createTable(tableDef{name: "t", families: []string{"f"}})

	// Valid for exactly one call: the check before applying.
	lease.set(1)
	m := bigtable.NewMutation()
	m.Set("f", "c", bigtable.ServerTime, []byte("v"))
	err := tbl.Apply(e.ctx, "r", m)
	wantCode(t, err, codes.Unavailable, "tablet server lease lapsed", "before the write was acknowledged")
	lease.set(1 << 40)
	if r, err := tbl.ReadRow(e.ctx, "r"); err != nil || len(r["f"]) != 1 {
		t.Fatalf("the unacknowledged write is not durable: %v %v", formatRow(r), err)
	}
	if v := counterValue(t, e.host.metrics.lease.refused.WithLabelValues("before_ack")); v != 1 {
		t.Fatalf("unacknowledged writes counted %v, want 1", v)
	}
}

// TestLeaseLapseDuringApply lapses the lease from inside each write — at
// the tablet's first clock reading, after the check before applying — and
// checks that every write RPC answers UNAVAILABLE although it was applied.
func TestLeaseLapseDuringApply(t *testing.T) {
	var valid, armed atomic.Bool
	valid.Store(true)
	lease := leaseFunc(valid.Load)
	clock := func() int64 {
		if armed.CompareAndSwap(true, false) {
			valid.Store(false)
		}
		return time.Now().UnixMicro()
	}
	e := newTestEnv(t, HostOptions{Lease: lease, Clock: clock}, DataOptions{})
	tbl := e.createTable(tableDef{name: "t", families: []string{"f"}, splits: []string{"m"}})
	for _, row := range []string{"a", "n", "z"} {
		m := bigtable.NewMutation()
		m.Set("f", "c", ts(1), []byte("old"))
		if err := tbl.Apply(e.ctx, row, m); err != nil {
			t.Fatal(err)
		}
	}

	// arm makes the lease lapse at the next clock reading.
	arm := func() { valid.Store(true); armed.Store(true) }
	check := func(name string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s acknowledged although the lease lapsed before the acknowledgement", name)
		}
		wantCode(t, err, codes.Unavailable, "tablet server lease lapsed", "before the write was acknowledged")
	}

	arm()
	m := bigtable.NewMutation()
	m.Set("f", "c", bigtable.ServerTime, []byte("mr"))
	check("MutateRow", tbl.Apply(e.ctx, "a", m))

	// One entry per tablet, so two batches: the one whose clock reading
	// lapsed the lease was applied and is not acknowledged; the other was
	// either applied before and not acknowledged either, or refused.
	arm()
	m1 := bigtable.NewMutation()
	m1.Set("f", "c", bigtable.ServerTime, []byte("bulk"))
	m2 := bigtable.NewMutation()
	m2.Set("f", "c", bigtable.ServerTime, []byte("bulk"))
	errs, err := tbl.ApplyBulk(e.ctx, []string{"b", "n"}, []*bigtable.Mutation{m1, m2})
	if err != nil || len(errs) != 2 {
		t.Fatalf("ApplyBulk: %v %v", errs, err)
	}
	unacked := 0
	for i, err := range errs {
		if err == nil {
			t.Fatalf("MutateRows entry %d acknowledged", i)
		}
		wantCode(t, err, codes.Unavailable, "tablet server lease lapsed")
		if strings.Contains(err.Error(), "before the write was acknowledged") {
			unacked++
		}
	}
	if unacked == 0 {
		t.Fatalf("no MutateRows entry was applied and left unacknowledged: %v", errs)
	}

	arm()
	tm := bigtable.NewMutation()
	tm.Set("f", "c", bigtable.ServerTime, []byte("matched"))
	check("CheckAndMutateRow", tbl.Apply(e.ctx, "n", bigtable.NewCondMutation(nil, tm, nil)))

	arm()
	rmw := bigtable.NewReadModifyWrite()
	rmw.AppendValue("f", "c", []byte("+"))
	_, err = tbl.ApplyReadModifyWrite(e.ctx, "z", rmw)
	check("ReadModifyWriteRow", err)

	// The writes were applied (durable): their outcome was unknown, not
	// failed.
	valid.Store(true)
	got := map[string]string{}
	if err := tbl.ReadRows(e.ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		got[r.Key()] = string(r["f"][0].Value)
		return true
	}, bigtable.RowFilter(bigtable.LatestNFilter(1))); err != nil {
		t.Fatal(err)
	}
	if got["a"] != "mr" || got["n"] != "matched" || got["z"] != "old+" {
		t.Fatalf("rows after unacknowledged writes: %v", got)
	}
	if v := counterValue(t, e.host.metrics.lease.refused.WithLabelValues("before_ack")); v < 4 {
		t.Fatalf("unacknowledged writes counted %v, want at least 4", v)
	}
}

// leaseFunc adapts a function to Lease.
type leaseFunc func() bool

func (f leaseFunc) Valid() bool { return f() }

// TestLeaseNil: without a lease there is no gauge, and nothing is refused.
func TestLeaseNil(t *testing.T) {
	e := newTestEnv(t, HostOptions{}, DataOptions{})
	tbl := e.createTable(tableDef{name: "t", families: []string{"f"}})
	for name, errs := range leaseWrites(e.ctx, tbl) {
		for i, err := range errs {
			if err != nil {
				t.Fatalf("%s[%d]: %v", name, i, err)
			}
		}
	}
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "tabula_lease_valid" {
			t.Fatal("lease gauge exported without a lease")
		}
	}
}
