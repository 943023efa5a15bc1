package coord_test

import (
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/coord/coordtest"
)

// fakeLocal is the in-process service with its clock exposed, so the suite
// advances time instead of sleeping.
type fakeLocal struct {
	*coord.Local
	clock *coord.FakeClock
}

func (f fakeLocal) Advance(d time.Duration) { f.clock.Advance(d) }

func TestLocalConformance(t *testing.T) {
	coordtest.Run(t, func(t *testing.T) coord.Service {
		clock := coord.NewFakeClock()
		l := coord.NewLocal(coord.LocalConfig{Clock: clock})
		t.Cleanup(func() { l.Close() })
		return fakeLocal{l, clock}
	})
}
