package pacing

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"
)

func TestRate(t *testing.T) {
	inf := math.Inf(1)
	for _, c := range []struct {
		name     string
		busy     bool
		pressure float64
		want     float64
	}{
		{"idle", false, 0, inf},
		{"idle under pressure", false, 0.5, inf},
		{"busy, no pressure", true, 0, 10},
		{"busy, negative pressure", true, -3, 10},
		{"busy, half pressure", true, 0.5, 45},
		{"busy, nearly full", true, 0.999, 10 + 70*0.999},
		{"busy, pressure 1", true, 1, inf},
		{"busy, pressure above 1", true, 7, inf},
		{"busy, NaN pressure", true, math.NaN(), inf},
	} {
		if got := Rate(c.busy, c.pressure, 10, 80); got != c.want {
			t.Errorf("%s: Rate = %v, want %v", c.name, got, c.want)
		}
	}
}

// fakeClock is a clock whose Sleep advances it.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	slept []time.Duration
	// onSleep runs after each sleep (the test changes the world there).
	onSleep func()
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.slept = append(c.slept, d)
	f := c.onSleep
	c.mu.Unlock()
	if f != nil {
		f()
	}
	return nil
}

func (c *fakeClock) total() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var s time.Duration
	for _, d := range c.slept {
		s += d
	}
	return s
}

func newTestPacer(c *fakeClock) *Pacer {
	return New(Config{MinRate: 1 << 20, MaxRate: 4 << 20, Quiet: 50 * time.Millisecond, Now: c.Now, Sleep: c.Sleep})
}

// newBusyPacer returns a test pacer on a fake clock with a request in
// flight until t ends.
func newBusyPacer(t *testing.T) (*fakeClock, *Pacer) {
	c := &fakeClock{now: time.Unix(1000, 0)}
	p := newTestPacer(c)
	p.Begin()
	t.Cleanup(p.End)
	return c, p
}

func zero() float64 { return 0 }

func TestPaceIdleDoesNotWait(t *testing.T) {
	c := &fakeClock{now: time.Unix(1000, 0)}
	p := newTestPacer(c)
	for range 10 {
		if err := p.Pace(context.Background(), 1<<20, zero); err != nil {
			t.Fatal(err)
		}
	}
	if c.total() != 0 {
		t.Fatalf("an idle server's background work waited %v", c.total())
	}
	if st := p.Stats(); st.Bytes != 10<<20 || st.PacedBytes != 0 || st.Waited != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestPaceBusyWaitsAtMinRate(t *testing.T) {
	c, p := newBusyPacer(t)
	// 3 MiB at 1 MiB/s: 3 s of waiting in all, in slices of maxSleep.
	for range 12 {
		if err := p.Pace(context.Background(), 256<<10, zero); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.total(); got != 3*time.Second {
		t.Fatalf("waited %v, want 3s", got)
	}
	for _, d := range c.slept {
		if d > maxSleep {
			t.Fatalf("one sleep of %v, longer than %v", d, maxSleep)
		}
	}
	if st := p.Stats(); st.PacedBytes != 3<<20 || st.Waited != 3*time.Second {
		t.Fatalf("stats %+v", st)
	}
}

func TestPaceRateGrowsWithPressure(t *testing.T) {
	c, p := newBusyPacer(t)
	// Pressure 0.5: 1 + 3*0.5 = 2.5 MiB/s; 5 MiB take 2 s.
	half := func() float64 { return 0.5 }
	if err := p.Pace(context.Background(), 5<<20, half); err != nil {
		t.Fatal(err)
	}
	if got := c.total(); got != 2*time.Second {
		t.Fatalf("waited %v, want 2s", got)
	}
}

func TestPaceRecentRequestCountsAsBusy(t *testing.T) {
	c := &fakeClock{now: time.Unix(1000, 0)}
	p := newTestPacer(c)
	p.Begin()
	p.End()
	// Ended just now: still busy for Quiet, so the first chunk is paced
	// — until the quiet time passes during the wait: then the rest of
	// the wait is forgiven.
	if err := p.Pace(context.Background(), 1<<20, zero); err != nil {
		t.Fatal(err)
	}
	if got := c.total(); got != 60*time.Millisecond {
		t.Fatalf("waited %v, want the 3 slices until the server turned idle (60ms)", got)
	}
	if !p.next.Equal(c.Now()) {
		t.Fatalf("the debt of the forgiven wait is kept: next %v, now %v", p.next, c.Now())
	}
	before := c.total()
	if err := p.Pace(context.Background(), 1<<20, zero); err != nil {
		t.Fatal(err)
	}
	if c.total() != before {
		t.Fatal("an idle server's next chunk waited")
	}
}

func TestPacePressureRisingEndsTheWait(t *testing.T) {
	c, p := newBusyPacer(t)
	pressure := 0.0
	var mu sync.Mutex
	sleeps := 0
	c.onSleep = func() {
		mu.Lock()
		defer mu.Unlock()
		if sleeps++; sleeps == 5 {
			pressure = 1 // e.g. someone now waits for the maintenance lock
		}
	}
	get := func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return pressure
	}
	if err := p.Pace(context.Background(), 10<<20, get); err != nil {
		t.Fatal(err)
	}
	if got := c.total(); got != 5*maxSleep {
		t.Fatalf("waited %v, want 5 slices", got)
	}
}

func TestPaceSharedDebt(t *testing.T) {
	// Two tablets' background work shares the rate: the second chunk
	// waits behind the first.
	c, p := newBusyPacer(t)
	p.mu.Lock()
	p.next = c.now.Add(time.Second) // another tablet charged 1 s
	p.mu.Unlock()
	if err := p.Pace(context.Background(), 1<<20, zero); err != nil {
		t.Fatal(err)
	}
	if got := c.total(); got != 2*time.Second {
		t.Fatalf("waited %v, want 2s (1 s behind the other tablet's chunk)", got)
	}
}

func TestPaceContextEnds(t *testing.T) {
	c, p := newBusyPacer(t)
	ctx, cancel := context.WithCancel(context.Background())
	c.onSleep = cancel
	err := p.Pace(ctx, 1<<20, zero)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Pace = %v, want context.Canceled", err)
	}
}

func TestNilPacer(t *testing.T) {
	var p *Pacer
	p.Begin()
	p.End()
	if p.Busy() {
		t.Fatal("a nil pacer is busy")
	}
	if err := p.Pace(context.Background(), 1<<30, zero); err != nil {
		t.Fatal(err)
	}
	if p.Stats() != (Stats{}) {
		t.Fatal("a nil pacer has stats")
	}
}

func TestBusyTracksInFlight(t *testing.T) {
	c := &fakeClock{now: time.Unix(1000, 0)}
	p := newTestPacer(c)
	if p.Busy() {
		t.Fatal("busy before any request")
	}
	p.Begin()
	c.now = c.now.Add(time.Hour)
	if !p.Busy() {
		t.Fatal("not busy with a request in flight for an hour")
	}
	p.End()
	c.now = c.now.Add(49 * time.Millisecond)
	if !p.Busy() {
		t.Fatal("not busy 49 ms after a request ended (quiet 50 ms)")
	}
	c.now = c.now.Add(time.Millisecond)
	if p.Busy() {
		t.Fatal("busy 50 ms after the last request ended")
	}
}

func TestIdleFor(t *testing.T) {
	c := &fakeClock{now: time.Unix(1000, 0)}
	p := newTestPacer(c)
	p.Begin()
	c.now = c.now.Add(time.Hour)
	if d := p.IdleFor(); d != 0 {
		t.Fatalf("idle for %v with a request in flight", d)
	}
	p.End()
	c.now = c.now.Add(700 * time.Millisecond)
	if d := p.IdleFor(); d != 700*time.Millisecond {
		t.Fatalf("idle for %v 700 ms after the request ended", d)
	}
	p.Touch()
	c.now = c.now.Add(time.Millisecond)
	if d := p.IdleFor(); d != time.Millisecond {
		t.Fatalf("idle for %v 1 ms after a touch", d)
	}
	if d := (*Pacer)(nil).IdleFor(); d != 0 {
		t.Fatalf("nil pacer idle for %v", d)
	}
}
