//go:build mrtestjobs || integration

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/tabuladb/tabula/mapreduce"
	"github.com/tabuladb/tabula/storage/cell"
)

// Jobs that only test binaries carry (build tag mrtestjobs, and the
// integration tests' own binary): the fault tests of remote workers run them
// on real `tabula worker` processes. Each is a word count of the values of a
// table (one row per word in the output table, its count as a decimal in
// column f:n), with a fault chosen by its configuration.

// faultJobConf configures the test jobs.
type faultJobConf struct {
	Table    string `json:"table"`
	Output   string `json:"output"`
	Reducers int    `json:"reducers"`
	// RowDelay is slept after each input row: it makes a job last long
	// enough for a worker to be killed in its middle.
	RowDelay time.Duration `json:"row_delay,omitempty"`
	// KeyDelay is slept before each reduce group: it makes the reduce
	// phase last long enough for a worker to be killed in it.
	KeyDelay time.Duration `json:"key_delay,omitempty"`
	// StuckMap, when ≥ 0, is a map task whose first attempt never ends by
	// itself (it waits until killed): only a backup attempt can finish it.
	StuckMap int `json:"stuck_map"`
	// FailMap, when ≥ 0, is a map task every attempt of which fails.
	FailMap int `json:"fail_map"`
}

func (c faultJobConf) encode() []byte {
	b, _ := json.Marshal(c)
	return b
}

// testFaultJobName is the registered name of the fault test job.
const testFaultJobName = "test-faults"

func init() {
	mapreduce.Register(testFaultJobName, "TABLE word count with injected faults (test binaries only)", buildFaultJob)
}

func buildFaultJob(conf []byte) (*mapreduce.Job, error) {
	c := faultJobConf{StuckMap: -1, FailMap: -1}
	if err := json.Unmarshal(conf, &c); err != nil {
		return nil, fmt.Errorf("conf: %w", err)
	}
	if c.Table == "" || c.Output == "" || c.Reducers < 1 {
		return nil, errors.New("conf: table, output and reducers ≥ 1 are required")
	}
	sum := func(values iter.Seq[[]byte]) (int64, error) {
		var n int64
		for v := range values {
			x, err := mapreduce.Int64.Decode(v)
			if err != nil {
				return 0, err
			}
			n += x
		}
		return n, nil
	}
	return &mapreduce.Job{
		Input: &mapreduce.TableInput{Table: c.Table},
		Map: func(ctx context.Context, row cell.Row, out mapreduce.MapContext) error {
			a := out.Task().Attempt
			if a.Task == c.FailMap {
				return fmt.Errorf("deliberate failure of map %d, attempt %d", a.Task, a.Attempt)
			}
			if a.Task == c.StuckMap && a.Attempt == 0 {
				<-ctx.Done() // only killing this attempt ends it
				return ctx.Err()
			}
			if c.RowDelay > 0 {
				select {
				case <-time.After(c.RowDelay):
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			one := mapreduce.Int64.Append(nil, 1)
			for _, cl := range row.Cells {
				for _, w := range strings.Fields(string(cl.Value)) {
					if err := out.Emit([]byte(w), one); err != nil {
						return err
					}
				}
			}
			return nil
		},
		Combine: func(_ []byte, values iter.Seq[[]byte], emit func([]byte) error) error {
			n, err := sum(values)
			if err != nil {
				return err
			}
			return emit(mapreduce.Int64.Append(nil, n))
		},
		Reduce: func(ctx context.Context, key []byte, values iter.Seq[[]byte], out mapreduce.ReduceContext) error {
			if c.KeyDelay > 0 {
				select {
				case <-time.After(c.KeyDelay):
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			n, err := sum(values)
			if err != nil {
				return err
			}
			return out.Write(cell.Row{Key: key, Cells: []cell.Cell{{Family: "f", Qualifier: []byte("n"), Timestamp: mapreduce.JobTimestamp, Value: []byte(strconv.FormatInt(n, 10))}}})
		},
		Reducers: c.Reducers,
		Output:   &mapreduce.TableOutput{Table: c.Output},
	}, nil
}
