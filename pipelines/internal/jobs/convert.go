package jobs

import (
	"context"
	"fmt"
	"reflect"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/tabuladb/tabula/beamio"
	"github.com/tabuladb/tabula/storage/cell"
)

// maxMutationsPerEntry is the API's limit of mutations in one entry: a
// row with more cells is written in several entries (not atomically, as
// the template's importer does with splitLargeRows).
const maxMutationsPerEntry = 100_000

// rowMutations returns the mutations that write every cell of r at its
// own timestamp.
func rowMutations(r cell.Row) []beamio.RowMutation {
	var out []beamio.RowMutation
	for start := 0; start < len(r.Cells); start += maxMutationsPerEntry {
		cells := r.Cells[start:min(start+maxMutationsPerEntry, len(r.Cells))]
		m := beamio.RowMutation{Row: r.Key, Mutations: make([]cell.Mutation, len(cells))}
		for i, c := range cells {
			m.Mutations[i] = cell.Set(c.Family, c.Qualifier, c.Timestamp, c.Value)
		}
		out = append(out, m)
	}
	return out
}

// toMutations is the ParDo of rowMutations over read rows.
func toMutations(r beamio.Row, emit func(beamio.RowMutation)) {
	for _, m := range rowMutations(cell.Row(r)) {
		emit(m)
	}
}

// prismSpin: the dead letters are logged after a shuffle, not in the
// writers' stage, so that the stage has an output. Prism v2.77.0 spins a
// core for as long as a bundle of a stage without outputs runs (its
// bundle loop selects on a closed channel), which halves the writes on
// two cores.

// logDeadLetter reports a dead letter in the worker's log; the run counts
// them (beamio's write_dead_letters) and fails.
func logDeadLetter(ctx context.Context, f beamio.FailedMutation) {
	deadLetters.Inc(ctx, 1)
	fmt.Printf("dead letter: %v\n", f)
}

var deadLetters = beam.NewCounter("pipelines", "dead_letters")

func init() {
	register.Function2x0(toMutations)
	register.Emitter1[beamio.RowMutation]()
	register.Function2x0(logDeadLetter)
	beam.RegisterType(reflect.TypeOf((*beamio.Row)(nil)).Elem())
}
