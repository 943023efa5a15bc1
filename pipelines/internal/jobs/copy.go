package jobs

import (
	"context"
	"fmt"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/x/beamx"

	"github.com/tabuladb/tabula/beamio"
	"github.com/tabuladb/tabula/pipelines/internal/pipe"
)

// CopyConfig copies the rows Read selects into a table, possibly on
// another server, every cell at its own timestamp.
type CopyConfig struct {
	Read beamio.ReadConfig
	// Dst is the target server (its Addr empty: Read's server; its Auth
	// zero: Read's credentials) and
	// DstTable the target table; Create creates it, or its missing
	// families, with the source's families. Without Create a missing
	// table, or one lacking any of the families copied, fails the copy
	// before anything is written.
	Dst      pipe.Conn
	DstTable string
	Create   bool
	Write    beamio.WriteConfig
}

// CopySummary is what a copy wrote.
type CopySummary struct {
	Entries, Bytes int64
}

// Copy checks both tables, runs the copy and returns what it wrote.
func Copy(ctx context.Context, cfg CopyConfig) (CopySummary, error) {
	src := cfg.Read.Table
	if cfg.DstTable == "" {
		return CopySummary{}, pipe.Usagef("--dst-table is required")
	}
	if cfg.Dst.Addr == "" {
		cfg.Dst.Addr = src.Addr
	}
	if cfg.Dst.Project == "" {
		cfg.Dst.Project = src.Project
	}
	if cfg.Dst.Instance == "" {
		cfg.Dst.Instance = src.Instance
	}
	if cfg.Dst.Auth == (beamio.Credentials{}) {
		cfg.Dst.Auth = src.Auth
	}
	if cfg.Dst.Addr == src.Addr && cfg.Dst.Project == src.Project && cfg.Dst.Instance == src.Instance && cfg.DstTable == src.Table {
		return CopySummary{}, pipe.Usagef("the destination is the source table %s", src.Table)
	}
	if _, err := pipe.CheckTable(ctx, src); err != nil {
		return CopySummary{}, err
	}
	srcConn := pipe.Conn{Addr: src.Addr, Project: src.Project, Instance: src.Instance, Auth: src.Auth}
	fams, err := pipe.Families(ctx, srcConn, src.Table)
	if err != nil {
		return CopySummary{}, err
	}
	if len(cfg.Read.Families) > 0 {
		fams = cfg.Read.Families
	}
	if err := pipe.EnsureFamilies(ctx, cfg.Dst, cfg.DstTable, fams, cfg.Create, "that the copy of "+src.Table+" writes"); err != nil {
		return CopySummary{}, err
	}
	wcfg := cfg.Write
	wcfg.Table = cfg.Dst.Table(cfg.DstTable)

	p, s := beam.NewPipelineWithRoot()
	rows, err := beamio.TryRead(s, cfg.Read)
	if err != nil {
		return CopySummary{}, pipe.UsageError{Err: err}
	}
	_, dead, err := beamio.TryWrite(s, wcfg, beam.ParDo(s, toMutations, rows))
	if err != nil {
		return CopySummary{}, pipe.UsageError{Err: err}
	}
	beam.ParDo0(s, logDeadLetter, beam.Reshuffle(s, dead)) // a shuffle: see prismSpin
	pr, err := beamx.RunWithMetrics(ctx, p)
	if err != nil {
		return CopySummary{}, fmt.Errorf("copy %s to %s: %w", src.Table, cfg.DstTable, err)
	}
	sum := CopySummary{Entries: pipe.Counter(pr, "write_entries"), Bytes: pipe.Counter(pr, "write_bytes")}
	if n := counter(pr, "dead_letters"); n > 0 {
		return sum, fmt.Errorf("copy %s to %s: the server refused %d entries (printed above)", src.Table, cfg.DstTable, n)
	}
	return sum, nil
}
