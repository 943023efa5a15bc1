package coord

import (
	"testing"
	"time"
)

// TestFenceWaitOutlastsHolderLease checks the argument of lease.go as a
// plain function on a fake timeline: whatever renewal last succeeded
// before EndSession destroyed the session (it started before the destroy),
// and with the holder's clock up to a tenth slower than the caller's, the
// holder's lease — measured on its own clock from that renewal's start —
// has ended by the time the caller's FenceWait after EndSession returned
// has passed.
func TestFenceWaitOutlastsHolderLease(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	for _, lease := range []time.Duration{time.Second, 3 * time.Second, 4 * time.Second, 9 * time.Second} {
		const ttl = 10 * time.Second
		h := HolderLease(ttl, lease)
		for _, startBefore := range []time.Duration{0, time.Millisecond, lease / 4, lease / 2, lease} {
			for _, endLatency := range []time.Duration{0, 50 * time.Millisecond, time.Second} {
				// Real time: the renewal starts at start, the service
				// destroys the session at destroyed, EndSession returns to
				// the caller at returned.
				destroyed := t0
				start := destroyed.Add(-startBefore)
				returned := destroyed.Add(endLatency)
				// Holder's clock runs slow: 1 holder second takes 1.1 real
				// seconds (the bound FenceWait allows for).
				holderUntil := LeaseUntil(start, ttl, lease) // on the holder's clock, from start
				realEnd := start.Add(time.Duration(float64(holderUntil.Sub(start)) * 1.1))
				callerTakes := returned.Add(FenceWait(h))
				if realEnd.After(callerTakes) {
					t.Errorf("lease %v, renewal started %v before the destroy, EndSession took %v: holder valid until %v after the destroy, caller acts at %v",
						lease, startBefore, endLatency, realEnd.Sub(destroyed), callerTakes.Sub(destroyed))
				}
			}
		}
	}
}

// TestHolderLeaseDecisions pins the plain functions a session's holder and
// the party ending it decide by.
func TestHolderLeaseDecisions(t *testing.T) {
	const ttl = 10 * time.Second
	for _, c := range []struct {
		lease, holder, every time.Duration
	}{
		{0, ttl, ttl / 3},
		{4 * time.Second, 4 * time.Second, time.Second},
		{ttl, ttl, ttl / 3},
		{time.Minute, ttl, ttl / 3},
	} {
		if got := HolderLease(ttl, c.lease); got != c.holder {
			t.Errorf("HolderLease(%v, %v) = %v, want %v", ttl, c.lease, got, c.holder)
		}
		if got := RenewEvery(ttl, c.lease); got != c.every {
			t.Errorf("RenewEvery(%v, %v) = %v, want %v", ttl, c.lease, got, c.every)
		}
		// The holder's promise survives the round trip through a Consul
		// session's name.
		if got := nameLease(holderName("tabletserver a:1/x", ttl, c.lease), ttl); got != c.holder {
			t.Errorf("lease through the name for Lease %v = %v, want %v", c.lease, got, c.holder)
		}
	}
	// A renewal moves the lease from its start: valid just before start+lease,
	// not at it.
	clock := NewFakeClock()
	start := clock.Now()
	until := LeaseUntil(start, ttl, 4*time.Second)
	clock.Advance(4*time.Second - time.Nanosecond)
	if !clock.Now().Before(until) {
		t.Error("lease over before its length passed")
	}
	clock.Advance(time.Nanosecond)
	if clock.Now().Before(until) {
		t.Error("lease still valid once its length passed since the renewal's start")
	}
	// A name that carries nothing usable falls back to the TTL, the
	// longer and so safe wait.
	for _, name := range []string{"tabletserver x", "x" + holderLeaseTag, "x" + holderLeaseTag + "soon", "x" + holderLeaseTag + "-3s"} {
		if got := nameLease(name, ttl); got != ttl {
			t.Errorf("nameLease(%q) = %v, want the TTL", name, got)
		}
	}
}
