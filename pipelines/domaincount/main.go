// Command domaincount is the Bigtable paper's kind of batch job as a Beam
// pipeline: over the Webtable (rows keyed by reversed URL, one anchor
// column per inbound link; `tabula load webtable` makes one), it counts
// the pages and the anchors of each domain (reversed host, com.cnn.www)
// and writes them to a table: row = domain, count:pages and
// count:anchors as big-endian 64-bit integers.
//
//	go run ./pipelines/domaincount --addr 127.0.0.1:8086 --table webtable --out-table domains
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
		cfg   jobs.DomainCountConfig
	)
	register := func(fs *flag.FlagSet) {
		conn.Register(fs, "", "")
		sel.Register(fs)
		fs.StringVar(&table, "table", "webtable", "the Webtable to read")
		fs.StringVar(&cfg.Out, "out-table", "domaincount", "table the counts go to (created with family count when missing)")
		fs.Int64Var(&cfg.Timestamp, "timestamp", 0, "timestamp of the cells written, microseconds (default now)")
	}
	pipe.Main("domaincount", "pages and anchors per domain of the Webtable, with Beam", register, func(ctx context.Context) error {
		read, err := sel.ReadConfig(conn.Table(table))
		if err != nil {
			return pipe.UsageError{Err: err}
		}
		cfg.Read = read
		n, err := jobs.DomainCount(ctx, cfg)
		if err != nil {
			return err
		}
		fmt.Printf("counted %s: %d domains written to %s\n", table, n, cfg.Out)
		return nil
	})
}
