package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"strconv"

	"github.com/tabuladb/tabula/mapreduce"
	"github.com/tabuladb/tabula/scripts"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/client"
)

// ScriptConf configures script.
type ScriptConf struct {
	// Input is the table and range the script runs over (no Where: the
	// script is the job).
	Input TableSpec `json:"input"`
	// Name names the script (its file) in errors; Source is its text.
	Name   string `json:"name"`
	Source string `json:"source"`
	// Limits per server run (zero: the servers' defaults).
	Limits scripts.Limits `json:"limits,omitempty"`
	// Output, optional, receives one row per aggregator key: row
	// TABLE/INDEX/…, column Family:value (default family "result") holding
	// the entry's value as JSON.
	Output OutputSpec `json:"output"`
	Family string     `json:"family,omitempty"`
}

// Script runs a script as a job: each map runs it inside the tablet
// servers over its split (client.RunScriptPartial: only the partial
// aggregates cross the network) and emits the partial; the one reducer
// merges the partials — the script's aggregator tables are the reduce —
// and reports them (ScriptResult), writing them to the output if one is
// set.
func Script(c ScriptConf) (*mapreduce.Job, error) {
	in, err := c.Input.Input()
	if err != nil {
		return nil, err
	}
	if in.Script != "" {
		return nil, fmt.Errorf("where: the script is the job; combine filters with --filter")
	}
	name := c.Name
	if name == "" {
		name = "script"
	}
	prog, err := scripts.Compile(name, c.Source)
	if err != nil {
		return nil, err
	}
	out, err := c.Output.Output()
	if err != nil {
		return nil, err
	}
	family := c.Family
	if family == "" {
		family = "result"
	}
	if !cell.ValidFamilyName(family) {
		return nil, &cell.InvalidArgumentError{Field: "family", Reason: "not a valid family name"}
	}
	return &mapreduce.Job{
		Input: in,
		MapSplit: func(ctx context.Context, split mapreduce.Split, mc mapreduce.MapContext) error {
			cl, err := mc.Client(c.Input.Addr)
			if err != nil {
				return err
			}
			opts := in.ScanOptions(mc.Task())
			var stats client.ScriptStats
			p, err := cl.RunScriptPartial(ctx, mc.Task().Job.TableName(split.Table), c.Source, client.ScriptOptions{
				Name: name, Start: split.Start, End: split.End, Filter: client.FilterOf(opts), Limits: c.Limits, Stats: &stats})
			if err != nil {
				return err
			}
			mc.Count(mapreduce.CounterInputRows, stats.RowsScanned)
			mc.Count("SCRIPT_ROWS", stats.Rows)
			mc.Count("SCRIPT_STEPS", stats.Steps)
			b, err := p.MarshalBinary()
			if err != nil {
				return err
			}
			return mc.Emit(nil, b)
		},
		Reducers: 1,
		Reduce: func(_ context.Context, _ []byte, partials iter.Seq[[]byte], rc mapreduce.ReduceContext) error {
			total := prog.NewPartial()
			for b := range partials {
				p := prog.NewPartial()
				if err := p.UnmarshalBinary(b); err != nil {
					return err
				}
				if err := total.Merge(p); err != nil {
					return err
				}
			}
			b, err := total.MarshalBinary()
			if err != nil {
				return err
			}
			rc.Report(b)
			if out == nil {
				return nil
			}
			rows, err := resultRows(total.Result(), family)
			if err != nil {
				return err
			}
			for _, r := range rows {
				if err := rc.Write(r); err != nil {
					return err
				}
			}
			return nil
		},
		Output: out,
	}, nil
}

// resultRows turns a script's tables into rows: TABLE/INDEX/… with the
// entry's value as JSON in family:value.
func resultRows(res *scripts.Result, family string) ([]cell.Row, error) {
	b, err := res.MarshalJSON()
	if err != nil {
		return nil, err
	}
	var tables map[string][]struct {
		Key   []json.RawMessage `json:"key"`
		Value json.RawMessage   `json:"value"`
	}
	if err := json.Unmarshal(b, &tables); err != nil {
		return nil, err
	}
	var rows []cell.Row
	for _, t := range res.Tables {
		for _, e := range tables[t.Name] {
			key := []byte(t.Name)
			for _, k := range e.Key {
				key = append(key, '/')
				if s, err := strconv.Unquote(string(k)); err == nil {
					key = append(key, s...)
				} else {
					key = append(key, k...)
				}
			}
			rows = append(rows, cell.Row{Key: key, Cells: []cell.Cell{{Family: family, Qualifier: []byte("value"), Timestamp: mapreduce.JobTimestamp, Value: e.Value}}})
		}
	}
	return rows, nil
}

// ScriptResult finalizes the merged aggregates the script job reported.
func ScriptResult(res *mapreduce.Result, name, source string) (*scripts.Result, error) {
	prog, err := scripts.Compile(name, source)
	if err != nil {
		return nil, err
	}
	total := prog.NewPartial()
	for _, r := range res.Reports {
		if r.Kind != mapreduce.ReduceTask {
			continue
		}
		p := prog.NewPartial()
		if err := p.UnmarshalBinary(r.Data); err != nil {
			return nil, err
		}
		if err := total.Merge(p); err != nil {
			return nil, err
		}
	}
	return total.Result(), nil
}

func init() {
	mapreduce.Register("script", "FILE --table T: run a script as a job (the mapper inside the tablet servers, its tables merged by the reducer); prints like tabula script run, or --output table:NAME", func(conf []byte) (*mapreduce.Job, error) {
		var c ScriptConf
		if err := decode(conf, &c); err != nil {
			return nil, err
		}
		return Script(c)
	})
}
