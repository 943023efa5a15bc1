package coord

import (
	"sort"
	"sync"
	"time"
)

// Clock is the time source of the in-process service: the real clock in
// single-process mode, a FakeClock in tests.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed; the
	// returned function cancels the call if it has not started.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// RealClock is the system clock.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// AfterFunc is time.AfterFunc.
func (RealClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// FakeClock is a Clock that moves only when Advance is called, so tests of
// TTLs and lock-delays need not sleep.
type FakeClock struct {
	mu     sync.Mutex
	now    time.Time
	seq    int
	timers map[int]fakeTimer
}

type fakeTimer struct {
	at  time.Time
	seq int
	f   func()
}

// NewFakeClock returns a FakeClock reading a fixed start time.
func NewFakeClock() *FakeClock {
	return &FakeClock{now: time.Date(2006, 11, 6, 0, 0, 0, 0, time.UTC), timers: map[int]fakeTimer{}}
}

// Now returns the clock's current time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f for when the clock has been advanced past d.
func (c *FakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	id := c.seq
	c.timers[id] = fakeTimer{at: c.now.Add(d), seq: id, f: f}
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, ok := c.timers[id]
		delete(c.timers, id)
		return ok
	}
}

// Advance moves the clock forward by d and runs, in time order and
// synchronously (unlike time.AfterFunc, so that a test sees their effects
// when Advance returns), the functions that became due.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	target := c.now.Add(d)
	for {
		var due []fakeTimer
		for _, t := range c.timers {
			if !t.at.After(target) {
				due = append(due, t)
			}
		}
		if len(due) == 0 {
			break
		}
		sort.Slice(due, func(i, j int) bool {
			if !due[i].at.Equal(due[j].at) {
				return due[i].at.Before(due[j].at)
			}
			return due[i].seq < due[j].seq
		})
		t := due[0]
		delete(c.timers, t.seq)
		if t.at.After(c.now) {
			c.now = t.at
		}
		// Run without the lock: f may read the clock or set timers.
		c.mu.Unlock()
		t.f()
		c.mu.Lock()
	}
	c.now = target
	c.mu.Unlock()
}
