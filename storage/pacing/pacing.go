// Package pacing slows a tablet server's background work — the minor and
// merging compactions its tablets start on their own — while the server is
// serving foreground requests, so that a read arriving during a compaction
// does not share the cores with it at full speed.
//
// The policy is HBase's pressure-aware compaction throughput control in
// spirit: while requests are in flight (or ended less than Config.Quiet
// ago) background work writes at most Rate(busy, pressure) bytes a second,
// from Config.MinRate when nothing presses it up to Config.MaxRate as the
// pressure nears 1, and unpaced at a pressure of 1 or more (a memtable
// full while its predecessor is still being written, SSTables piling up
// past twice the merge threshold, someone waiting for the tablet's
// maintenance lock). When the server is idle, background work runs
// unpaced: it is then the only thing to do.
//
// A Pacer is shared by all tablets of a server, so the rate bounds their
// sum. Foreground requests are marked with Begin and End (the server's
// gRPC interceptors); background writers call Pace after each chunk they
// write.
package pacing

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tabuladb/tabula/internal/ctxtime"
)

// Config tunes a Pacer. Zero values take the documented defaults.
type Config struct {
	// MinRate is the rate, in bytes per second, background work writes at
	// while foreground requests are served and nothing presses it;
	// default 16 MiB/s.
	MinRate float64
	// MaxRate is the busy rate as the pressure nears 1; default
	// 8 × MinRate.
	MaxRate float64
	// Quiet is how long after the last foreground request ended the
	// server still counts as busy (requests of a closed-loop client
	// arrive back to back, never all at once); default 50 ms.
	Quiet time.Duration
	// Now is the clock; default time.Now. Tests set it.
	Now func() time.Time
	// Sleep waits for d or until ctx ends; default a timer. Tests set it.
	Sleep func(ctx context.Context, d time.Duration) error
}

// DefaultMinRate is Config.MinRate's default.
const DefaultMinRate = 16 << 20

// maxSleep bounds one wait, so that a pacer sleeping on a deadline set at
// a low rate notices soon when the server turns idle or the pressure
// rises to 1.
const maxSleep = 20 * time.Millisecond

// Pacer paces background work against foreground requests. Its methods
// are safe for concurrent use; a nil *Pacer never paces.
type Pacer struct {
	cfg      Config
	inFlight atomic.Int64
	lastEnd  atomic.Int64 // unix nanoseconds of the last End or Touch

	mu   sync.Mutex
	next time.Time // when the bytes charged so far have been paid for

	pacedNanos atomic.Int64
	pacedBytes atomic.Int64
	totalBytes atomic.Int64
}

// New returns a Pacer with cfg's settings.
func New(cfg Config) *Pacer {
	if cfg.MinRate <= 0 {
		cfg.MinRate = DefaultMinRate
	}
	if cfg.MaxRate < cfg.MinRate {
		cfg.MaxRate = 8 * cfg.MinRate
	}
	if cfg.Quiet <= 0 {
		cfg.Quiet = 50 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Sleep == nil {
		cfg.Sleep = ctxtime.Sleep
	}
	return &Pacer{cfg: cfg}
}

// Begin marks the start of a foreground request; End its end. Every Begin
// needs one End.
func (p *Pacer) Begin() {
	if p != nil {
		p.inFlight.Add(1)
	}
}

// End marks the end of a foreground request begun with Begin.
func (p *Pacer) End() {
	if p == nil {
		return
	}
	p.lastEnd.Store(p.cfg.Now().UnixNano())
	p.inFlight.Add(-1)
}

// Touch marks foreground work that has no end to mark: a message received
// on a stream that stays open between requests. The server counts as busy
// for Config.Quiet after it.
func (p *Pacer) Touch() {
	if p != nil {
		p.lastEnd.Store(p.cfg.Now().UnixNano())
	}
}

// Busy reports whether a foreground request is in flight or one ended
// less than Config.Quiet ago.
func (p *Pacer) Busy() bool {
	if p == nil {
		return false
	}
	if p.inFlight.Load() > 0 {
		return true
	}
	return p.cfg.Now().UnixNano()-p.lastEnd.Load() < int64(p.cfg.Quiet)
}

// IdleFor reports how long the server has been without foreground work:
// 0 while a request is in flight, else the time since the last one ended
// (or was touched).
func (p *Pacer) IdleFor() time.Duration {
	if p == nil || p.inFlight.Load() > 0 {
		return 0
	}
	return time.Duration(max(0, p.cfg.Now().UnixNano()-p.lastEnd.Load()))
}

// Rate is the pacing policy: the bytes per second background work may
// write, +Inf for unpaced. Idle servers and a pressure of 1 or more are
// unpaced; a busy server's rate grows linearly from minRate at pressure 0
// to maxRate as the pressure nears 1 (a negative pressure counts as 0).
func Rate(busy bool, pressure, minRate, maxRate float64) float64 {
	if !busy || pressure >= 1 || math.IsNaN(pressure) {
		return math.Inf(1)
	}
	pressure = max(pressure, 0)
	return minRate + (maxRate-minRate)*pressure
}

// Pace is called by background work after it wrote n more bytes; it
// returns when the work may go on, or ctx's error. pressure is read again
// while Pace waits, so that a rise to 1 (or the server turning idle) ends
// the wait at once. The wait is what the bytes cost at the rate in force
// when they were charged, added after the bytes charged before (by every
// tablet of the server).
func (p *Pacer) Pace(ctx context.Context, n int, pressure func() float64) error {
	if p == nil || n <= 0 {
		return nil
	}
	p.totalBytes.Add(int64(n))
	rate := Rate(p.Busy(), pressure(), p.cfg.MinRate, p.cfg.MaxRate)
	now := p.cfg.Now()
	p.mu.Lock()
	if math.IsInf(rate, 1) {
		// Unpaced work leaves no debt for the next paced chunk.
		p.next = now
		p.mu.Unlock()
		return nil
	}
	if p.next.Before(now) {
		p.next = now
	}
	p.next = p.next.Add(time.Duration(float64(n) / rate * float64(time.Second)))
	deadline := p.next
	p.mu.Unlock()
	p.pacedBytes.Add(int64(n))
	start := now
	defer func() { p.pacedNanos.Add(int64(p.cfg.Now().Sub(start))) }()
	for {
		wait := deadline.Sub(now)
		if wait <= 0 {
			return nil
		}
		if err := p.cfg.Sleep(ctx, min(wait, maxSleep)); err != nil {
			return err
		}
		now = p.cfg.Now()
		if math.IsInf(Rate(p.Busy(), pressure(), p.cfg.MinRate, p.cfg.MaxRate), 1) {
			p.mu.Lock()
			p.next = now
			p.mu.Unlock()
			return nil
		}
	}
}

// Stats are a Pacer's counters since New.
type Stats struct {
	// Bytes is what background work reported to Pace; PacedBytes the part
	// charged at a finite rate; Waited the time Pace spent waiting.
	Bytes, PacedBytes int64
	Waited            time.Duration
}

// Stats returns the counters; the zero Stats for a nil Pacer.
func (p *Pacer) Stats() Stats {
	if p == nil {
		return Stats{}
	}
	return Stats{Bytes: p.totalBytes.Load(), PacedBytes: p.pacedBytes.Load(), Waited: time.Duration(p.pacedNanos.Load())}
}
