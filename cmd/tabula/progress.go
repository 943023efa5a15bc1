package main

// Progress displays of long CLI work (load, bench, export, mr): a bar on a
// terminal, plain lines elsewhere (a file, a pipe, CI's log), where a
// bar's carriage returns would leave hundreds of frames in the output.

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progressDisplay is what long work reports to: units done (Add), a
// description that may carry a rate (Describe), and the end (Finish).
// Implementations are safe for concurrent use.
type progressDisplay interface {
	Add(n int) error
	Describe(description string)
	Finish() error
}

// plainProgressEvery is the interval of the plain progress lines.
const plainProgressEvery = 5 * time.Second

// newProgress returns the progress display of total units (rows,
// requests, files) on w: a bar when w is a terminal, else a plainProgress.
// Callers may put a rate (MB/s) in the description.
func newProgress(w io.Writer, total int64, what, unit string) progressDisplay {
	if isTerminal(w) {
		return newProgressBar(w, total, what, unit)
	}
	return newPlainProgress(w, total, what, unit)
}

// newProgressBar returns a progress bar on w, whatever w is.
func newProgressBar(w io.Writer, total int64, what, unit string) *progressbar.ProgressBar {
	return progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString(unit),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionShowElapsedTimeOnFinish(),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
	)
}

// plainProgress writes a line at most every interval (plainProgressEvery) while units
// are added, and one at Finish: "what: done/total unit after T (R unit/s)".
// It has no goroutine of its own, so work that ends without Finish (an
// error) leaves nothing running; work that stalls prints nothing until it
// moves again.
type plainProgress struct {
	w           io.Writer
	total       int64
	unit        string
	every       time.Duration // between lines while units are added
	start       time.Time
	done        atomic.Int64
	nextLine    atomic.Int64 // unix nanoseconds of the next line due
	mu          sync.Mutex   // serialises lines and guards description
	description string
	finished    bool
}

func newPlainProgress(w io.Writer, total int64, what, unit string) *plainProgress {
	p := &plainProgress{w: w, total: total, unit: unit, every: plainProgressEvery, start: time.Now(), description: what}
	p.nextLine.Store(p.start.Add(p.every).UnixNano())
	return p
}

// Add counts n more units, and writes a line if one is due.
func (p *plainProgress) Add(n int) error {
	p.done.Add(int64(n))
	now := time.Now()
	due := p.nextLine.Load()
	if now.UnixNano() < due || !p.nextLine.CompareAndSwap(due, now.Add(p.every).UnixNano()) {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finished {
		return nil
	}
	_, err := fmt.Fprintln(p.w, p.line(now))
	return err
}

// Describe replaces the description the next line starts with.
func (p *plainProgress) Describe(description string) {
	p.mu.Lock()
	p.description = description
	p.mu.Unlock()
}

// Finish writes the last line; later calls and Adds write nothing.
func (p *plainProgress) Finish() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finished {
		return nil
	}
	p.finished = true
	_, err := fmt.Fprintln(p.w, p.line(time.Now()))
	return err
}

// line is one progress line as of now; p.mu held.
func (p *plainProgress) line(now time.Time) string {
	d := now.Sub(p.start)
	done := p.done.Load()
	count := fmt.Sprint(done)
	if p.total >= 0 {
		count = fmt.Sprintf("%d/%d", done, p.total)
	}
	return fmt.Sprintf("%s: %s %s after %s (%.0f %s/s)", p.description, count, p.unit,
		d.Round(time.Millisecond), float64(done)/max(d.Seconds(), 1e-9), p.unit)
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
