// Command export writes a Tabula table to Parquet files with a Beam
// pipeline: the schema of Google's Bigtable→Parquet Dataflow template
// (every version, each cell with its timestamp), or one column per
// family:qualifier (--layout columns), as shards PREFIX-SSSSS-of-NNNNN.parquet
// in a directory or an s3:// location.
//
//	go run ./pipelines/export --addr 127.0.0.1:8086 --table webtable --out /tmp/webtable
package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/tabuladb/tabula/pipelines/internal/jobs"
	"github.com/tabuladb/tabula/pipelines/internal/pipe"
	"github.com/tabuladb/tabula/rowfile"
)

func main() {
	var (
		conn    pipe.Conn
		sel     pipe.Selection
		table   string
		out     string
		prefix  string
		shards  int
		layout  string
		codec   string
		columns string
	)
	register := func(fs *flag.FlagSet) {
		conn.Register(fs, "", "")
		sel.Register(fs)
		fs.StringVar(&table, "table", "", "table to export (required)")
		fs.StringVar(&out, "out", "", "output: a directory, or s3://BUCKET/PATH?endpoint=HOST:PORT&secure=false (required)")
		fs.StringVar(&prefix, "prefix", "", "shard name prefix (default the table name)")
		fs.IntVar(&shards, "shards", 0, "number of files (default one per tablet)")
		fs.StringVar(&layout, "layout", "template", "template (every version, the Dataflow template's schema) or columns (newest value per family:qualifier)")
		fs.StringVar(&codec, "codec", "snappy", "page compression: snappy, gzip, zstd or none")
		fs.StringVar(&columns, "columns", "", "columns layout: family:qualifier,... (default every column read)")
	}
	pipe.Main("export", "a table to Parquet files with Beam", register, func(ctx context.Context) error {
		if table == "" {
			return pipe.Usagef("--table is required")
		}
		read, err := sel.ReadConfig(conn.Table(table))
		if err != nil {
			return pipe.UsageError{Err: err}
		}
		cfg := jobs.ExportConfig{Read: read, Out: out, Prefix: prefix, Shards: shards}
		switch layout {
		case "template":
			cfg.Format = rowfile.Parquet
		case "columns":
			cfg.Format = rowfile.ParquetColumns
		default:
			return pipe.Usagef("--layout %q: want template or columns", layout)
		}
		if cfg.Codec, err = rowfile.ParseCodec(codec); err != nil {
			return pipe.Usagef("--codec: %v", err)
		}
		for _, c := range strings.Split(columns, ",") {
			if c == "" {
				continue
			}
			col, err := rowfile.ParseColumn(c)
			if err != nil {
				return pipe.Usagef("--columns: %v", err)
			}
			cfg.Columns = append(cfg.Columns, col)
		}
		sum, err := jobs.Export(ctx, cfg)
		if err != nil {
			return err
		}
		fmt.Printf("exported %s: %d rows, %d cells, %d bytes in %d files under %s\n", table, sum.Rows, sum.Cells, sum.Bytes, len(sum.Files), out)
		return nil
	})
}
