// Package vm compiles a checked script to Go closures and runs it, one input
// row at a time, under limits on steps, memory, wall time and call depth.
//
// Compilation resolves everything it can once: every variable is a slot in
// the run's globals, its statics or the current call frame, every table an
// index, every operator a closure specialized for its operand types; running
// a row then only calls closures. A Machine is one run of a Program: it owns
// the slots and the tables' partial states, and is used by one goroutine at
// a time. A Program is immutable and may be run by many Machines at once.
package vm

import (
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"time"
	"unsafe"

	"github.com/tabuladb/tabula/scripts/agg"
	"github.com/tabuladb/tabula/scripts/check"
	"github.com/tabuladb/tabula/scripts/syntax"
	"github.com/tabuladb/tabula/scripts/value"
	"github.com/tabuladb/tabula/storage/cell"
)

// Limits bound one run of a script. A zero field takes its default.
type Limits struct {
	// Steps bounds the work done for one row: statements executed, loop
	// iterations and calls. Default 10,000,000.
	Steps int64
	// Memory bounds the bytes allocated while processing one row (strings,
	// bytes, arrays, maps built by the script) plus the bytes the tables
	// hold. Default 256 MiB.
	Memory int64
	// Time bounds the wall time of the whole run, from NewMachine on.
	// Default 10 minutes.
	Time time.Duration
	// Depth bounds the nesting of function calls. Default 10,000.
	Depth int
}

// DefaultLimits are the limits a zero Limits field takes.
var DefaultLimits = Limits{Steps: 10_000_000, Memory: 256 << 20, Time: 10 * time.Minute, Depth: 10_000}

func (l Limits) withDefaults() Limits {
	if l.Steps <= 0 {
		l.Steps = DefaultLimits.Steps
	}
	if l.Memory <= 0 {
		l.Memory = DefaultLimits.Memory
	}
	if l.Time <= 0 {
		l.Time = DefaultLimits.Time
	}
	if l.Depth <= 0 {
		l.Depth = DefaultLimits.Depth
	}
	return l
}

// ErrLimit is matched (errors.Is) by every LimitError.
var ErrLimit = errors.New("script exceeded a limit")

// LimitError reports that a run went past one of its Limits.
type LimitError struct {
	Pos   syntax.Pos // the statement running when the limit was hit
	Bound string     // "step", "memory", "time" or "call depth"
	Limit string     // the limit, as configured
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%v: script exceeded %s limit (%s)", e.Pos, e.Bound, e.Limit)
}

// Is makes errors.Is(err, ErrLimit) true.
func (e *LimitError) Is(target error) bool { return target == ErrLimit }

// RuntimeError is an error in a script detected while it runs: an index out
// of range, a missing map key, a division by zero, a failed conversion.
type RuntimeError struct {
	Pos syntax.Pos
	Msg string
	// Panic is set when the error is a Go panic caught inside the
	// implementation: a bug in Tabula, not in the script.
	Panic bool
}

func (e *RuntimeError) Error() string { return fmt.Sprintf("%v: runtime error: %s", e.Pos, e.Msg) }

// timeCheckEvery is how many steps pass between two looks at the clock:
// often enough to stop within a millisecond or so, rarely enough to cost
// nothing measurable.
const timeCheckEvery = 4096

// timeCheckRows is how many rows pass between two looks at the clock when
// rows are short.
const timeCheckRows = 32

// Machine is one run of a Program.
type Machine struct {
	prog    *Program
	limits  Limits
	globals []value.Value
	statics []value.Value
	stack   []value.Value
	fp, sp  int
	depth   int
	ret     value.Value

	steps     int64 // steps taken in the current row
	nextCheck int64 // when steps reaches it, look at the limits
	mem       int64 // bytes allocated in the current row
	// goStack estimates the Go stack the current calls hold: evaluation
	// recurses through closures, as deep as the calls times the nesting of
	// the called functions, and Go kills a process whose goroutine stack
	// passes 1 GB, so it counts against the memory limit.
	goStack  int64
	tableMem int64 // bytes held by the tables
	deadline time.Time
	start    int64 // run start, what now() returns
	pos      syntax.Pos
	rows     int64 // rows processed
	kept     int64 // rows kept
	// totalSteps counts the steps of the rows before the current one.
	totalSteps int64

	tables  []*agg.Table
	keep    bool
	err     error // sticky: once a row fails, the run has failed
	started bool  // statics initialized

	regexps map[string]*regexp.Regexp

	// Buffers reused from row to row for input.cells: nothing a script
	// can keep outlives the row (tables copy what they keep).
	input    value.TupleVal
	cellsArr value.ArrayVal
	cells    []value.Value
	cellTups []value.TupleVal
	cellVals []value.Value
}

// NewMachine starts a run of p under limits.
func NewMachine(p *Program, limits Limits) *Machine {
	limits = limits.withDefaults()
	now := time.Now()
	m := &Machine{
		prog:     p,
		limits:   limits,
		globals:  make([]value.Value, p.numGlobals),
		statics:  make([]value.Value, p.numStatics),
		stack:    make([]value.Value, 0, 64),
		deadline: now.Add(limits.Time),
		start:    now.UnixMicro(),
		regexps:  map[string]*regexp.Regexp{},
	}
	m.input.Fields = make([]value.Value, 2)
	for _, spec := range p.specs {
		m.tables = append(m.tables, agg.New(spec))
	}
	return m
}

// Tables returns the run's tables, in declaration order.
func (m *Machine) Tables() []*agg.Table { return m.tables }

// Stats describes the work of a run so far.
type Stats struct {
	Rows       int64 // rows processed (including a failed one)
	Kept       int64 // rows kept (filter mode)
	Steps      int64 // steps taken over all rows
	TableBytes int64 // estimated memory held by the tables
}

// Stats returns the run's counters.
func (m *Machine) Stats() Stats {
	return Stats{Rows: m.rows, Kept: m.kept, Steps: m.totalSteps + m.steps, TableBytes: m.tableMem}
}

// Err returns the error that stopped the run, if any.
func (m *Machine) Err() error { return m.err }

// Process runs the script over one row. It reports whether the script kept
// the row (emitted true to keep). The row is not retained: its bytes may be
// reused once Process returns. After an error the run is over: tables may
// hold part of the failed row's emits, and later calls return the same
// error.
func (m *Machine) Process(row cell.Row) (kept bool, err error) {
	if m.err != nil {
		return false, m.err
	}
	defer func() {
		if r := recover(); r != nil {
			m.err = m.asError(r)
			kept, err = false, m.err
		}
	}()
	m.resetRow()
	m.rows++
	if !m.started {
		m.started = true
		for _, s := range m.prog.statics {
			s(m)
		}
		m.resetRow()
	}
	m.setInput(row)
	for _, s := range m.prog.body {
		s(m)
	}
	if m.keep {
		m.kept++
	}
	return m.keep, nil
}

func (m *Machine) resetRow() {
	m.totalSteps += m.steps
	m.steps = 0
	m.mem = 0
	m.keep = false
	m.fp, m.sp, m.depth, m.goStack = 0, 0, 0, 0
	m.stack = m.stack[:0]
	m.nextCheck = min(m.limits.Steps, timeCheckEvery)
	// Reading the clock costs as much as a short row: look every few rows
	// (long rows look every timeCheckEvery steps, in checkLimits).
	if m.rows%timeCheckRows == 0 && time.Now().After(m.deadline) {
		m.limit("time", m.limits.Time.String())
	}
}

// asError turns a panic raised while running a script into an error. Go
// runtime errors (a bug in an intrinsic, say) are reported as script errors
// at the current statement rather than crashing the server.
func (m *Machine) asError(r any) error {
	switch e := r.(type) {
	case *RuntimeError:
		return e
	case *LimitError:
		return e
	case runtime.Error:
		return &RuntimeError{Pos: m.pos, Msg: e.Error(), Panic: true}
	}
	return &RuntimeError{Pos: m.pos, Msg: fmt.Sprint(r), Panic: true}
}

// setInput makes row the value of input. Strings alias the row's bytes:
// values are immutable, and tables clone what they keep.
func (m *Machine) setInput(row cell.Row) {
	m.input.Fields[check.InputKey] = value.Value{S: unsafeString(row.Key)}
	if !m.prog.usesCells {
		m.cellsArr.Elems = nil
		m.input.Fields[check.InputCells] = value.Value{R: &m.cellsArr}
		m.globals[check.InputSlot] = value.Value{R: &m.input}
		return
	}
	n := len(row.Cells)
	if cap(m.cells) < n {
		m.cells = make([]value.Value, n)
		m.cellTups = make([]value.TupleVal, n)
		m.cellVals = make([]value.Value, 4*n)
	}
	m.cells, m.cellTups, m.cellVals = m.cells[:n], m.cellTups[:n], m.cellVals[:4*n]
	for i := range row.Cells {
		c := &row.Cells[i]
		f := m.cellVals[4*i : 4*i+4 : 4*i+4]
		f[value.CellFamily] = value.Value{S: c.Family}
		f[value.CellQualifier] = value.Value{S: unsafeString(c.Qualifier)}
		f[value.CellTimestamp] = value.Value{N: c.Timestamp}
		f[value.CellValue] = value.Value{S: unsafeString(c.Value)}
		m.cellTups[i].Fields = f
		m.cells[i] = value.Value{R: &m.cellTups[i]}
	}
	m.cellsArr.Elems = m.cells
	m.input.Fields[check.InputCells] = value.Value{R: &m.cellsArr}
	m.globals[check.InputSlot] = value.Value{R: &m.input}
}

func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// tick counts one step at pos and records pos for errors raised without a
// position of their own (limits, Go runtime panics). It is inlined into every
// statement, so the common path is two stores, an increment and a compare.
func (m *Machine) tick(pos syntax.Pos) {
	m.pos = pos
	m.steps++
	if m.steps >= m.nextCheck {
		m.checkLimits(pos)
	}
}

// work counts the steps of an intrinsic that walks n bytes or elements, so
// that a loop over long strings meets the step and time limits as soon as a
// loop over many statements would.
func (m *Machine) work(n int) {
	m.steps += int64(n >> 6)
	if m.steps >= m.nextCheck {
		m.checkLimits(m.pos)
	}
}

func (m *Machine) checkLimits(pos syntax.Pos) {
	m.pos = pos
	if m.steps >= m.limits.Steps {
		m.limit("step", fmt.Sprint(m.limits.Steps))
	}
	if time.Now().After(m.deadline) {
		m.limit("time", m.limits.Time.String())
	}
	m.nextCheck = min(m.limits.Steps, m.steps+timeCheckEvery)
}

func (m *Machine) limit(bound, limit string) {
	panic(&LimitError{Pos: m.pos, Bound: bound, Limit: limit})
}

// alloc charges n bytes to the row's memory.
func (m *Machine) alloc(n int64) {
	m.mem += n
	if m.mem+m.tableMem+m.goStack > m.limits.Memory {
		m.limit("memory", fmt.Sprintf("%d bytes", m.limits.Memory))
	}
}

// stackPerLevel is the Go stack, in bytes, one level of nesting in a
// called function may take (measured: about 230 bytes).
const stackPerLevel = 256

// maxGoStack caps the estimated Go stack whatever the memory limit, well
// below the 1 GB at which Go aborts the process (stacks grow by doubling).
const maxGoStack = 256 << 20

func (m *Machine) fail(pos syntax.Pos, format string, args ...any) {
	panic(&RuntimeError{Pos: pos, Msg: fmt.Sprintf(format, args...)})
}
