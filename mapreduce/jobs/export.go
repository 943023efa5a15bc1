package jobs

import (
	"context"
	"fmt"
	"slices"

	"github.com/tabuladb/tabula/mapreduce"
	"github.com/tabuladb/tabula/rowfile"
	"github.com/tabuladb/tabula/storage/cell"
)

// ExportConf configures export.
type ExportConf struct {
	Input TableSpec `json:"input"`
	// Out is a directory or s3://bucket/prefix; Format "parquet" (the
	// Bigtable→Parquet template's layout) or "jsonl".
	Out    string `json:"out"`
	Format string `json:"format"`
}

// Export writes a table's rows, every version with its timestamp, as
// files part-SSSSS-of-NNNNN.parquet|jsonl (one per map), committed at the
// end of the job with a _SUCCESS manifest.
func Export(c ExportConf) (*mapreduce.Job, error) {
	in, err := c.Input.Input()
	if err != nil {
		return nil, err
	}
	if c.Out == "" {
		return nil, fmt.Errorf("out: required")
	}
	f, err := rowfile.ParseFormat(c.Format)
	if err != nil {
		return nil, err
	}
	if f != rowfile.Parquet && f != rowfile.JSONL {
		return nil, fmt.Errorf("format %q: want parquet or jsonl", c.Format)
	}
	return &mapreduce.Job{
		Input: in,
		Map: func(_ context.Context, row cell.Row, out mapreduce.MapContext) error {
			return out.Write(row)
		},
		Output: &mapreduce.FileOutput{URL: c.Out, Format: f.String()},
	}, nil
}

// ImportConf configures import.
type ImportConf struct {
	// In is the directory or s3:// prefix an export wrote.
	In string `json:"in"`
	// Table (on Addr, default the job's cluster) receives the rows.
	Table string `json:"table"`
	Addr  string `json:"addr,omitempty"`
	// Prefix names the files' shard set (mapreduce.FileInput.Prefix):
	// empty takes part-…, or the one set In holds.
	Prefix string `json:"prefix,omitempty"`
}

// Import writes the rows of exported files (Parquet or JSON Lines, every
// cell with its own timestamp) into a table, one map per file.
func Import(c ImportConf) (*mapreduce.Job, error) {
	if c.In == "" || c.Table == "" {
		return nil, fmt.Errorf("in and table: required")
	}
	return &mapreduce.Job{
		Input: &mapreduce.FileInput{URL: c.In, Prefix: c.Prefix},
		Map: func(_ context.Context, row cell.Row, out mapreduce.MapContext) error {
			return out.Write(row)
		},
		Output: &mapreduce.TableOutput{Addr: c.Addr, Table: c.Table},
	}, nil
}

// ImportFamilies returns, sorted, the column families the rows of an
// export's files use: the shard set under in that Import reads
// (mapreduce.FileInput: prefix, or part-…, or the one set there). It
// reads every file whole, so that a table can be checked for them before
// anything is written (a row of a missing family would fail partway
// through the import, after other rows were written). Errors: no
// complete set of files, an unreadable file or row.
func ImportFamilies(ctx context.Context, in, prefix string) ([]string, error) {
	_, _, readers, err := mapreduce.FileShards(ctx, &mapreduce.FileInput{URL: in, Prefix: prefix})
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, r := range readers {
			r.Close()
		}
	}()
	seen := map[string]bool{}
	for _, r := range readers {
		if err := rowfile.Each(r, func(row cell.Row) error {
			for _, c := range row.Cells {
				seen[c.Family] = true
			}
			return ctx.Err()
		}); err != nil {
			return nil, fmt.Errorf("input %s: %w", in, err)
		}
	}
	fams := make([]string, 0, len(seen))
	for f := range seen {
		fams = append(fams, f)
	}
	slices.Sort(fams)
	return fams, nil
}

func init() {
	mapreduce.Register("export", "TABLE --out DIR|s3://… --format parquet|jsonl: write a table's rows (all versions) as files", func(conf []byte) (*mapreduce.Job, error) {
		var c ExportConf
		if err := decode(conf, &c); err != nil {
			return nil, err
		}
		return Export(c)
	})
	mapreduce.Register("import", "DIR TABLE: write the rows of exported files into a table, keeping timestamps", func(conf []byte) (*mapreduce.Job, error) {
		var c ImportConf
		if err := decode(conf, &c); err != nil {
			return nil, err
		}
		return Import(c)
	})
}
