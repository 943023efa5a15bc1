package scripts

import (
	"fmt"
	"strings"

	"github.com/tabuladb/tabula/scripts/agg"
	"github.com/tabuladb/tabula/scripts/check"
	"github.com/tabuladb/tabula/scripts/syntax"
	"github.com/tabuladb/tabula/scripts/vm"
	"github.com/tabuladb/tabula/storage/cell"
)

// Limits bound a run; see vm.Limits. A zero field takes its default.
type Limits = vm.Limits

// DefaultLimits are the limits zero fields of Limits take.
var DefaultLimits = vm.DefaultLimits

// LimitError reports a run stopped by one of its limits.
type LimitError = vm.LimitError

// RuntimeError reports an error in a script found while it ran.
type RuntimeError = vm.RuntimeError

// ErrLimit is matched by errors.Is for every LimitError.
var ErrLimit = vm.ErrLimit

// Diagnostic is one syntax or type error.
type Diagnostic struct {
	Line, Col int
	Msg       string
}

func (d Diagnostic) String() string { return fmt.Sprintf("%d:%d: %s", d.Line, d.Col, d.Msg) }

// CompileError lists every diagnostic found in a script, sorted by
// position. Its message has one LINE:COL: message line per diagnostic; the
// caller adds the file name.
type CompileError struct {
	Name        string
	Diagnostics []Diagnostic
}

func (e *CompileError) Error() string {
	lines := make([]string, len(e.Diagnostics))
	for i, d := range e.Diagnostics {
		lines[i] = d.String()
	}
	return strings.Join(lines, "\n")
}

// MaxSourceSize bounds the size of a script: servers compile what clients
// send.
const MaxSourceSize = 1 << 20

// Program is a compiled script. It is immutable and may be run by any number
// of Runs at once.
type Program struct {
	name string
	code *vm.Program
}

// Compile parses and type-checks src, the script called name, and compiles
// it. On failure the error is a *CompileError with every syntax error or,
// when the syntax is fine, every type error.
func Compile(name, src string) (p *Program, err error) {
	// The server compiles scripts from clients: a bug in the compiler must
	// fail the request, not the process.
	defer func() {
		if r := recover(); r != nil {
			p, err = nil, fmt.Errorf("scripts: internal error compiling %s: %v", name, r)
		}
	}()
	if len(src) > MaxSourceSize {
		return nil, &CompileError{Name: name, Diagnostics: []Diagnostic{{1, 1, fmt.Sprintf("script is %d bytes, more than the %d allowed", len(src), MaxSourceSize)}}}
	}
	file, serrs := syntax.Parse(src)
	if len(serrs) > 0 {
		ce := &CompileError{Name: name}
		for _, e := range serrs {
			ce.Diagnostics = append(ce.Diagnostics, Diagnostic{e.Pos.Line, e.Pos.Col, e.Msg})
		}
		return nil, ce
	}
	prog, cerrs := check.Check(file)
	if len(cerrs) > 0 {
		ce := &CompileError{Name: name}
		for _, e := range cerrs {
			ce.Diagnostics = append(ce.Diagnostics, Diagnostic{e.Pos.Line, e.Pos.Col, e.Msg})
		}
		return nil, ce
	}
	return &Program{name: name, code: vm.Compile(prog)}, nil
}

// Name is the name the program was compiled with.
func (p *Program) Name() string { return p.name }

// IsFilter reports whether the script emits to keep, i.e. selects rows.
func (p *Program) IsFilter() bool { return p.code.IsFilter() }

// TableSpecs describes the script's tables in declaration order.
func (p *Program) TableSpecs() []*agg.Spec { return p.code.Specs() }

// Run is one execution of a program over a sequence of rows. It is used by
// one goroutine at a time.
type Run struct {
	prog *Program
	m    *vm.Machine
}

// NewRun starts a run under limits; its wall-time limit counts from now.
func (p *Program) NewRun(limits Limits) *Run {
	return &Run{prog: p, m: vm.NewMachine(p.code, limits)}
}

// Process runs the script over row and reports whether the script kept it
// (filter mode; false when the script never emits to keep). Process does
// not retain row. After an error (a *LimitError or *RuntimeError) the run
// is over and every later call returns the same error.
func (r *Run) Process(row cell.Row) (kept bool, err error) { return r.m.Process(row) }

// Stats describes a run's work so far.
type Stats = vm.Stats

// Stats returns the run's counters, for metrics and logs.
func (r *Run) Stats() Stats { return r.m.Stats() }

// Partial returns the run's tables as a partial aggregate. It shares state
// with the run: process no more rows while using it.
func (r *Run) Partial() *Partial { return &Partial{prog: r.prog, tables: r.m.Tables()} }

// Result finalizes the run's tables.
func (r *Run) Result() *Result { return r.Partial().Result() }
