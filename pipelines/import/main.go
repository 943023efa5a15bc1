// Command import writes Parquet files in the schema of Google's
// Bigtable→Parquet Dataflow template (as pipelines/export and tabula
// export write them) into a Tabula table with a Beam pipeline, every cell
// at its own timestamp. Every file is checked — schema, then every row —
// before anything is written. --create creates the table, or the
// families the files use that it lacks; without it a missing table or
// family fails the import with nothing written.
//
//	go run ./pipelines/import --addr 127.0.0.1:8086 --in /tmp/webtable --table webtable2 --create
package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/tabuladb/tabula/beamio"
	"github.com/tabuladb/tabula/pipelines/internal/jobs"
	"github.com/tabuladb/tabula/pipelines/internal/pipe"
	"github.com/tabuladb/tabula/rowfile"
)

func main() {
	var (
		cfg    jobs.ImportConfig
		format string
	)
	register := func(fs *flag.FlagSet) {
		cfg.Conn.Register(fs, "", "")
		fs.StringVar(&cfg.Table, "table", "", "table to write (required)")
		fs.StringVar(&cfg.In, "in", "", "input: a directory, or s3://BUCKET/PATH?endpoint=HOST:PORT&secure=false (required)")
		fs.StringVar(&cfg.Prefix, "prefix", "", "shard name prefix (default the only one in --in)")
		fs.StringVar(&format, "format", "parquet", "parquet (the template layout) or jsonl")
		fs.BoolVar(&cfg.Create, "create", false, "create the table, or the families it lacks that the files use")
		fs.IntVar(&cfg.Write.BatchEntries, "batch-entries", beamio.DefaultBatchEntries, "row mutations per write batch")
		fs.Int64Var(&cfg.Write.BatchBytes, "batch-bytes", beamio.DefaultBatchBytes, "bytes per write batch")
		fs.Int64Var(&cfg.Write.MaxOutstandingBytes, "max-outstanding-bytes", beamio.DefaultMaxOutstandingBytes, "bytes of writes in flight per worker bundle")
	}
	pipe.Main("import", "Parquet files (the template's schema) to a table with Beam", register, func(ctx context.Context) error {
		var err error
		if cfg.Format, err = rowfile.ParseFormat(format); err != nil {
			return pipe.Usagef("--format: %v", err)
		}
		sum, err := jobs.Import(ctx, cfg)
		if err != nil {
			return err
		}
		fmt.Printf("imported %d files into %s: %d rows, %d cells\n", len(sum.Files), cfg.Table, sum.Rows, sum.Cells)
		return nil
	})
}
