package beamio

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"cloud.google.com/go/bigtable"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/passert"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"
	"google.golang.org/grpc/codes"

	"github.com/tabuladb/tabula/internal/devtest"
	"github.com/tabuladb/tabula/storage/cell"
)

// deadLetterLine names a dead letter for comparisons: its row (long keys
// by length) and its code.
func deadLetterLine(f FailedMutation) string {
	key := string(f.Mutation.Row)
	if len(key) > 40 {
		key = fmt.Sprintf("%s…(%d bytes)", key[:8], len(key))
	}
	if f.Message == "" {
		return key + " " + codes.Code(f.Code).String() + " WITHOUT A MESSAGE"
	}
	return key + " " + codes.Code(f.Code).String()
}

func writtenOf(r WriteResult) int64 { return r.Written }
func failedOf(r WriteResult) int64  { return r.Failed }

// countRowsFn counts the rows of a table through the official client,
// once per input element: run after Wait, it sees every write.
type countRowsFn struct {
	Addr, Table string
}

func (f *countRowsFn) ProcessElement(ctx context.Context, _ []byte, emit func(int)) error {
	c, err := bigtable.NewClient(ctx, "tabula", "dev", devtest.ClientOptions(f.Addr)...)
	if err != nil {
		return err
	}
	defer c.Close()
	n := 0
	err = c.Open(f.Table).ReadRows(ctx, bigtable.InfiniteRange(""), func(bigtable.Row) bool { n++; return true })
	emit(n)
	return err
}

func init() {
	register.Function1x1(deadLetterLine)
	register.Function1x1(writtenOf)
	register.Function1x1(failedOf)
	register.DoFn3x1[context.Context, []byte, func(int), error](&countRowsFn{})
	register.Emitter1[int]()
}

// TestWriteDeadLetters writes a batch in which some entries are invalid:
// every valid one is applied, exactly the invalid ones reach the dead
// letters with their status, and a step after Wait sees every write.
func TestWriteDeadLetters(t *testing.T) {
	const table = "write"
	dev.CreateTable(t, table, []string{"f"}, "m")
	var muts []any
	var wantDead []any
	valid := 0
	for i := range 400 {
		key := []byte(fmt.Sprintf("%c%04d", 'a'+i%26, i))
		m := RowMutation{Row: key, Mutations: []cell.Mutation{cell.Set("f", []byte("q"), 1_000_000, []byte(fmt.Sprintf("v%d", i)))}}
		switch i % 50 {
		case 7: // unknown family
			m.Mutations = append(m.Mutations, cell.Set("nope", []byte("q"), 1_000_000, []byte("x")))
			wantDead = append(wantDead, string(key)+" NotFound")
		case 19: // row key over the 64 KiB limit
			m.Row = append(bytes.Repeat([]byte("k"), 64<<10), key...)
			wantDead = append(wantDead, fmt.Sprintf("kkkkkkkk…(%d bytes) InvalidArgument", len(m.Row)))
		case 31: // qualifier over the 16 KiB limit
			m.Mutations[0].Qualifier = bytes.Repeat([]byte("q"), 16<<10+1)
			wantDead = append(wantDead, string(key)+" InvalidArgument")
		default:
			valid++
		}
		muts = append(muts, m)
	}
	p, s := beam.NewPipelineWithRoot()
	in := beam.Create(s, muts...)
	results, dead := Write(s, WriteConfig{Table: Table{Addr: dev.Addr, Table: table}, BatchEntries: 64}, in)
	passert.Equals(s, beam.ParDo(s, deadLetterLine, dead), wantDead...)
	passert.Equals(s, stats.Sum(s, beam.ParDo(s, writtenOf, results)), int64(valid))
	passert.Equals(s, stats.Sum(s, beam.ParDo(s, failedOf, results)), int64(len(wantDead)))
	after := Wait(s, results, beam.Impulse(s))
	passert.Equals(s, beam.ParDo(s, &countRowsFn{Addr: dev.Addr, Table: table}, after), valid)
	if err := ptest.Run(p); err != nil {
		t.Fatalf("pipeline: %v", err)
	}
	// The table holds exactly the valid entries.
	rows := dev.ReadRows(t, table, bigtable.InfiniteRange(""))
	if len(rows) != valid {
		t.Fatalf("table has %d rows, want %d", len(rows), valid)
	}
	for _, r := range rows {
		if len(r.Cells) != 1 || r.Cells[0].Family != "f" || !strings.HasPrefix(string(r.Cells[0].Value), "v") {
			t.Fatalf("row %q: cells %v", r.Key, r.Cells)
		}
	}
}
