package jobs

import (
	"context"
	"iter"
	"strconv"
	"strings"
	"unicode"

	"github.com/tabuladb/tabula/mapreduce"
	"github.com/tabuladb/tabula/storage/cell"
)

// WordCountConf configures wordcount.
type WordCountConf struct {
	// Input is the Webtable (or any table); Families default to anchor.
	Input TableSpec `json:"input"`
	// Output receives one row per word: column Family:count (default
	// family "count") holding the count in decimal, at the job's output
	// timestamp. Empty: counters only.
	Output OutputSpec `json:"output"`
	Family string     `json:"family,omitempty"`
	// Reducers, default 4.
	Reducers int `json:"reducers,omitempty"`
}

// Words splits text into lower-case words: runs of letters and digits.
func Words(text string) []string {
	return strings.FieldsFunc(strings.ToLower(text), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}

// WordCount counts the words of the input's cell values — by default the
// Webtable's anchor texts, the text other pages use to link to a page —
// with a combiner summing on the map side. It is the example of a typed
// Go job: string keys, int64 values.
func WordCount(c WordCountConf) (*mapreduce.Job, error) {
	if len(c.Input.Families) == 0 {
		c.Input.Families = []string{"anchor"}
	}
	in, err := c.Input.Input()
	if err != nil {
		return nil, err
	}
	out, err := c.Output.Output()
	if err != nil {
		return nil, err
	}
	family := c.Family
	if family == "" {
		family = "count"
	}
	if !cell.ValidFamilyName(family) {
		return nil, &cell.InvalidArgumentError{Field: "family", Reason: "not a valid family name"}
	}
	reducers := c.Reducers
	if reducers <= 0 {
		reducers = 4
	}
	sum := func(_ string, counts iter.Seq[int64], emit func(int64) error) error {
		var n int64
		for v := range counts {
			n += v
		}
		return emit(n)
	}
	return &mapreduce.Job{
		Input: in,
		Map: mapreduce.TypedMap(mapreduce.String, mapreduce.Int64, func(_ context.Context, row cell.Row, emit func(string, int64) error, _ mapreduce.MapContext) error {
			for _, cl := range row.Cells {
				for _, w := range Words(string(cl.Value)) {
					if err := emit(w, 1); err != nil {
						return err
					}
				}
			}
			return nil
		}),
		Combine:  mapreduce.TypedCombine(mapreduce.String, mapreduce.Int64, sum),
		Reducers: reducers,
		Reduce: mapreduce.TypedReduce(mapreduce.String, mapreduce.Int64, func(_ context.Context, word string, counts iter.Seq[int64], out mapreduce.ReduceContext) error {
			var n int64
			for v := range counts {
				n += v
			}
			out.Count("WORDS", 1)
			return out.Write(cell.Row{Key: []byte(word), Cells: []cell.Cell{{Family: family, Qualifier: []byte("count"), Timestamp: mapreduce.JobTimestamp, Value: strconv.AppendInt(nil, n, 10)}}})
		}),
		Output: out,
	}, nil
}

func init() {
	mapreduce.Register("wordcount", "TABLE: count the words of the anchor texts (--families to change), with a combiner; --output table:NAME or DIR", func(conf []byte) (*mapreduce.Job, error) {
		var c WordCountConf
		if err := decode(conf, &c); err != nil {
			return nil, err
		}
		return WordCount(c)
	})
}
