package vm

import (
	"errors"
	"strings"
	"testing"

	"github.com/tabuladb/tabula/scripts/syntax"
	"github.com/tabuladb/tabula/storage/cell"
)

// TestGoPanicBecomesError checks that a Go runtime panic inside evaluation
// (a bug in an intrinsic, say) ends the run with a RuntimeError at the
// current statement instead of crashing the server.
func TestGoPanicBecomesError(t *testing.T) {
	pos := syntax.Pos{Line: 3, Col: 7}
	p := &Program{numGlobals: 1, body: []exec{func(m *Machine) ctl {
		m.tick(pos)
		var a []int
		i := 5
		_ = a[i]
		return ctlNext
	}}}
	m := NewMachine(p, Limits{})
	_, err := m.Process(cell.Row{})
	var re *RuntimeError
	if !errors.As(err, &re) || !re.Panic || re.Pos != pos || !strings.Contains(err.Error(), "index out of range") {
		t.Fatalf("got %#v", err)
	}
	if _, again := m.Process(cell.Row{}); again != err {
		t.Fatalf("the run went on after a panic: %v", again)
	}
}

// TestDefaultLimits checks that zero limits take the defaults.
func TestDefaultLimits(t *testing.T) {
	if got := (Limits{Steps: 5}).withDefaults(); got.Steps != 5 || got.Memory != DefaultLimits.Memory || got.Time != DefaultLimits.Time || got.Depth != DefaultLimits.Depth {
		t.Fatalf("got %+v", got)
	}
}
