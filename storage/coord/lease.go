package coord

import (
	"strings"
	"time"
)

// # A holder's lease shorter than the TTL
//
// Consul's shortest session TTL is 10 s, and Consul may wait twice that
// before it expires a session. Whoever takes over a holder's locks after
// ending its session (Service.EndSession) must still wait until the holder
// can no longer believe its lease valid; with the TTL as the lease that is
// a whole TTL after EndSession returns. SessionOptions.Lease lets a holder
// promise a shorter lease:
//
//   - The holder renews every Lease/4 (sooner after a failure), and its
//     session is Valid only until Lease after the START of the last
//     renewal that succeeded, on its own monotonic clock (LeaseUntil).
//     When that moment passes without a newer success Valid turns false
//     at once, synchronously; the holder must then act on nothing its
//     locks guard. Unlike a lapse this is not final: renewals go on, and
//     one that succeeds makes the session Valid again — it proves the
//     session was not destroyed before the service handled it, so the
//     argument below holds for it too. Lapsed still closes, for good,
//     only when a whole TTL passes without a success (the service may
//     then expire the session). So a lock service that is down for
//     longer than Lease but less than the TTL pauses the holder instead
//     of ending it.
//   - EndSession destroys the session in the service, and returns the
//     holder's lease (HolderLease: Lease, or the TTL without one). This
//     is the moment from which the holder provably cannot renew any more:
//     a renewal the service handles after the destroy fails, so every
//     renewal that succeeded started before EndSession returned.
//   - Hence, for a holder whose clock runs at most a tenth slow, its lease
//     ends before HolderLease plus a tenth (FenceWait) has passed after
//     EndSession returned, on the clock of whoever called it. That is how
//     long the master waits before it takes a tablet server's key
//     (and so reassigns its tablets), instead of a TTL.
//
// The promise travels with the session: Consul stores it in the session's
// name (holderName), where EndSession reads it back, so the party ending a
// session never relies on its own configuration matching the holder's.
// A session that lapses early for want of a renewal (a slow lock service
// under load) costs its holder its locks — a reassignment — never safety.

// LeaseUntil is when a holder's lease ends after a renewal that started at
// start and succeeded: start plus the lease (HolderLease). It is measured
// from the start, not the answer: the service may have handled the
// renewal, and a destroy after it, at any moment in between.
func LeaseUntil(start time.Time, ttl, lease time.Duration) time.Time {
	return start.Add(HolderLease(ttl, lease))
}

// HolderLease is the lease a session's holder keeps: SessionOptions.Lease
// when set and shorter than the TTL, else the TTL.
func HolderLease(ttl, lease time.Duration) time.Duration {
	if lease > 0 && lease < ttl {
		return lease
	}
	return ttl
}

// RenewEvery is how often a background session is renewed: a quarter of
// a holder's own lease (so that three renewals in a row may fail without
// a lapse), a third of the TTL without one.
func RenewEvery(ttl, lease time.Duration) time.Duration {
	if h := HolderLease(ttl, lease); h < ttl {
		return h / 4
	}
	return ttl / 3
}

// FenceWait is how long after EndSession returned a lease of the given
// length (EndSession's result) may still be believed valid by its holder:
// the lease plus a tenth, for the holder's clock running up to a tenth
// slower than the caller's.
func FenceWait(lease time.Duration) time.Duration { return lease + lease/10 }

// holderLeaseTag marks a holder's own lease in a Consul session's name.
const holderLeaseTag = " holder-lease="

// holderName is the name of a Consul session that carries the holder's
// lease (none without one).
func holderName(name string, ttl, lease time.Duration) string {
	if h := HolderLease(ttl, lease); h < ttl {
		return name + holderLeaseTag + h.String()
	}
	return name
}

// nameLease returns the holder's lease a session's name carries, and the
// TTL when it carries none or one not shorter.
func nameLease(name string, ttl time.Duration) time.Duration {
	i := strings.LastIndex(name, holderLeaseTag)
	if i < 0 {
		return ttl
	}
	d, err := time.ParseDuration(name[i+len(holderLeaseTag):])
	if err != nil {
		return ttl
	}
	return HolderLease(ttl, d)
}
