package mapreduce_test

import (
	"context"
	"fmt"
	"iter"
	"strconv"
	"strings"

	"github.com/tabuladb/tabula/mapreduce"
	"github.com/tabuladb/tabula/storage/cell"
)

// A typed job: count the words of the anchor texts of a Webtable, with a
// combiner, writing one row per word. Keys are strings and values int64,
// encoded by the String and Int64 codecs (both order-preserving, so the
// reducer sees the words in order). Registering the job by name lets
// `tabula mr run anchorwords` and workers in other processes build it.
func Example() {
	sum := func(_ string, counts iter.Seq[int64], emit func(int64) error) error {
		var n int64
		for c := range counts {
			n += c
		}
		return emit(n)
	}
	build := func(conf []byte) (*mapreduce.Job, error) {
		table := string(conf) // the configuration: here just the table's name
		return &mapreduce.Job{
			Input: &mapreduce.TableInput{Table: table, Families: []string{"anchor"}},
			Map: mapreduce.TypedMap(mapreduce.String, mapreduce.Int64,
				func(_ context.Context, row cell.Row, emit func(string, int64) error, _ mapreduce.MapContext) error {
					for _, c := range row.Cells {
						for _, w := range strings.Fields(strings.ToLower(string(c.Value))) {
							if err := emit(w, 1); err != nil {
								return err
							}
						}
					}
					return nil
				}),
			Combine:  mapreduce.TypedCombine(mapreduce.String, mapreduce.Int64, sum),
			Reducers: 4,
			Reduce: mapreduce.TypedReduce(mapreduce.String, mapreduce.Int64,
				func(_ context.Context, word string, counts iter.Seq[int64], out mapreduce.ReduceContext) error {
					var n int64
					for c := range counts {
						n += c
					}
					return out.Write(cell.Row{Key: []byte(word), Cells: []cell.Cell{{
						Family: "count", Qualifier: []byte("n"),
						Timestamp: mapreduce.JobTimestamp, // fixed per run: re-runs rewrite the same cells
						Value:     strconv.AppendInt(nil, n, 10),
					}}})
				}),
			Output: &mapreduce.TableOutput{Table: table + "-words"},
		}, nil
	}
	mapreduce.Register("anchorwords", "TABLE: words of the anchor texts", build)

	job, err := mapreduce.Build("anchorwords", []byte("webtable"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(job.Validate() == nil, job.Reducers, job.Output.(*mapreduce.TableOutput).Table)
	// Against a server: res, err := mapreduce.Run(ctx, job, mapreduce.Config{Addr: "127.0.0.1:8086"})
	// Output: true 4 webtable-words
}
