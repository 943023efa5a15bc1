package tabletserver

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// Lease is what the Host asks of the tablet server's lock-service session
// before it applies a write and again before it acknowledges one (see
// HostOptions.Lease). A coord.Session satisfies it (checked by the tests,
// so that this package does not depend on coord).
//
// Valid must report, synchronously and cheaply, whether the lease is known
// to be valid now; it is called twice on every write, from many goroutines.
type Lease interface {
	Valid() bool
}

// ErrLeaseLapsed matches (errors.Is) the error of every write the Host
// refused or did not acknowledge because HostOptions.Lease was not valid.
// Its gRPC status is UNAVAILABLE, so that clients retry elsewhere once the
// master has reassigned the tablet.
var ErrLeaseLapsed = errors.New("tablet server lease lapsed")

// leaseError is a write refused for a lapsed lease. unacked: the lease
// lapsed after the write was applied (and made durable in the commit log),
// before it was acknowledged, so the write may have taken effect.
type leaseError struct{ unacked bool }

func (e *leaseError) Error() string {
	if e.unacked {
		return "tablet server lease lapsed before the write was acknowledged; it may have been applied"
	}
	return "tablet server lease lapsed; write refused, nothing changed"
}

func (e *leaseError) Is(target error) bool { return target == ErrLeaseLapsed }

func (e *leaseError) GRPCStatus() *status.Status { return status.New(codes.Unavailable, e.Error()) }

// WriteRefused reports whether err is a write the Host refused before
// applying it because its lease had lapsed: nothing changed, so the write
// may be sent again (to the tablet's next server). A write whose lease
// lapsed only after it was applied matches ErrLeaseLapsed but not this.
func WriteRefused(err error) bool {
	var le *leaseError
	return errors.As(err, &le) && !le.unacked
}

var (
	errLeaseRefused = &leaseError{}
	errLeaseUnacked = &leaseError{unacked: true}
)

// leaseMetrics are the lease gate's metrics.
type leaseMetrics struct {
	valid   prometheus.GaugeFunc // registered only with a Lease
	refused *prometheus.CounterVec
}

func newLeaseMetrics(h *Host) *leaseMetrics {
	m := &leaseMetrics{
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tabula_lease_refused_writes_total",
			Help: "Writes (row mutations) not acknowledged because the tablet server's lease had lapsed, " +
				"by when the lapse was seen: before_apply (nothing changed) or before_ack (the outcome is unknown to the client).",
		}, []string{"when"}),
	}
	if h.opts.Lease != nil {
		m.valid = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tabula_lease_valid",
			Help: "1 while the tablet server's lock-service lease is valid (writes are accepted), 0 once it lapsed.",
		}, func() float64 {
			if h.opts.Lease.Valid() {
				return 1
			}
			return 0
		})
	}
	return m
}

func (m *leaseMetrics) collectors() []prometheus.Collector {
	cs := []prometheus.Collector{m.refused}
	if m.valid != nil {
		cs = append(cs, m.valid)
	}
	return cs
}

// checkLease returns nil when the Host has no lease or its lease is valid,
// and otherwise the error for n writes refused before being applied
// (unacked false) or applied but not acknowledged (unacked true), counted.
func (h *Host) checkLease(n int, unacked bool) error {
	if h.opts.Lease == nil || n == 0 || h.opts.Lease.Valid() {
		return nil
	}
	if unacked {
		h.metrics.lease.refused.WithLabelValues("before_ack").Add(float64(n))
		return errLeaseUnacked
	}
	h.metrics.lease.refused.WithLabelValues("before_apply").Add(float64(n))
	return errLeaseRefused
}

// writeTablet is withTablet for writes: fn runs only while the lease is
// valid (checked before every attempt, so also after waiting out a split),
// and a write fn reports done is acknowledged (nil returned) only if the
// lease is still valid after it returned — that is, after the commit log
// made it durable. Every write of the Host passes here or through
// applyBatch, which checks the same way.
func (h *Host) writeTablet(ctx context.Context, id meta.TableID, row []byte, fn func(*tablet.Tablet) error) error {
	if err := h.admitWrite(ctx, id); err != nil {
		return err
	}
	err := h.withTablet(ctx, id, row, func(tb *tablet.Tablet) error {
		if err := h.checkLease(1, false); err != nil {
			return err
		}
		return fn(tb)
	})
	if err != nil {
		return err
	}
	return h.checkLease(1, true)
}

// fenceStateStore wraps the tablets' StateStore so that a state is saved
// only while lease is valid; otherwise Save fails with an error matching
// ErrLeaseLapsed and nothing is saved. Background compactions and flushes
// save states at any time: a server whose lease lapsed must not overwrite
// the state of a tablet the master may have assigned to another server
// meanwhile. (A save that began while the lease was valid may still
// complete after it lapsed; the master reassigns a dead server's tablets
// only after holding its lock, a full lock-delay later.) Loads are not
// fenced.
func fenceStateStore(s tablet.StateStore, lease Lease) tablet.StateStore {
	return &fencedStateStore{StateStore: s, lease: lease}
}

type fencedStateStore struct {
	tablet.StateStore
	lease Lease
}

// Forget passes tablet.Forgetter on to the store it fences.
func (f *fencedStateStore) Forget(id string) {
	if fs, ok := f.StateStore.(tablet.Forgetter); ok {
		fs.Forget(id)
	}
}

func (f *fencedStateStore) Save(ctx context.Context, st tabletdesc.State) error {
	if !f.lease.Valid() {
		return fmt.Errorf("tablet %s: state not saved: %w", st.ID, ErrLeaseLapsed)
	}
	return f.StateStore.Save(ctx, st)
}
