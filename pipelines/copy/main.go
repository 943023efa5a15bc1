// Command copy copies a Tabula table (or the rows and cells selected) to
// another table, possibly on another server, with a Beam pipeline; every
// cell keeps its timestamp.
//
//	go run ./pipelines/copy --addr 127.0.0.1:8086 --table users --dst-table users_copy --create
package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/tabuladb/tabula/pipelines/internal/jobs"
	"github.com/tabuladb/tabula/pipelines/internal/pipe"
)

func main() {
	var (
		conn  pipe.Conn
		sel   pipe.Selection
		table string
		cfg   jobs.CopyConfig
	)
	register := func(fs *flag.FlagSet) {
		conn.Register(fs, "", "")
		sel.Register(fs)
		fs.StringVar(&table, "table", "", "source table (required)")
		fs.StringVar(&cfg.DstTable, "dst-table", "", "destination table (required)")
		fs.StringVar(&cfg.Dst.Addr, "dst-addr", "", "destination server host:port (default --addr)")
		fs.StringVar(&cfg.Dst.Project, "dst-project", "", "destination project (default --project)")
		fs.StringVar(&cfg.Dst.Instance, "dst-instance", "", "destination instance (default --instance)")
		cfg.Dst.RegisterAuth(fs, "dst-", "destination (default: the source's credentials): ")
		fs.BoolVar(&cfg.Create, "create", false, "create the destination table (or its missing families) with the source's families")
	}
	pipe.Main("copy", "a table to a table, possibly on another server, with Beam", register, func(ctx context.Context) error {
		if table == "" {
			return pipe.Usagef("--table is required")
		}
		read, err := sel.ReadConfig(conn.Table(table))
		if err != nil {
			return pipe.UsageError{Err: err}
		}
		cfg.Read = read
		sum, err := jobs.Copy(ctx, cfg)
		if err != nil {
			return err
		}
		fmt.Printf("copied %s to %s: %d entries, %d bytes\n", table, cfg.DstTable, sum.Entries, sum.Bytes)
		return nil
	})
}
