package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/tabuladb/tabula/cmd/tabula/internal/webtable"
	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/sstable"
	"github.com/tabuladb/tabula/storage/tablet"
)

type demoFlags struct {
	dir         string
	rows        int
	concurrency int
	seed        uint64
}

func newDemoCommand() *cobra.Command {
	var f demoFlags
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the storage engine on a local directory: load a Webtable, read it back, compact, split",
		Long: `demo exercises the storage engine on the embedded default (a local
directory for SSTables, tablet state and the commit log): it loads a
synthetic Webtable (the paper's Figure 1) with concurrent writers sharing
group commits, reads com.cnn.www back, scans a site, runs a major
compaction and splits the tablet in two without copying data. Run it again
on the same --dir and it recovers what is there (also after kill -9).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runDemo(ctx, f, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&f.dir, "dir", "", "directory for the tablet's files (required)")
	cmd.Flags().IntVar(&f.rows, "rows", 20000, "Webtable rows to load")
	cmd.Flags().IntVar(&f.concurrency, "concurrency", 16, "concurrent writers")
	cmd.Flags().Uint64Var(&f.seed, "seed", 1, "seed of the synthetic crawl")
	_ = cmd.MarkFlagRequired("dir")
	return cmd
}

// webtableSchema puts the small, often-read families in an in-memory
// locality group, as the paper suggests for language and anchor metadata.
func webtableSchema() tablet.Schema {
	return tablet.Schema{
		Families: map[string]tablet.Family{
			webtable.FamilyContents: {GC: tablet.GCPolicy{MaxVersions: 3}},
			webtable.FamilyAnchor:   {LocalityGroup: "meta"},
			webtable.FamilyLanguage: {LocalityGroup: "meta"},
		},
		LocalityGroups: map[string]tablet.LocalityGroup{
			tablet.DefaultLocalityGroup: {Compression: sstable.ZstdCompression},
			"meta":                      {InMemory: true, Compression: sstable.SnappyCompression},
		},
	}
}

// demoEngine is the tablets of the demo table on one local directory.
type demoEngine struct {
	opts    tablet.Options
	log     *commitlog.Log
	tablets []*tablet.Tablet // ordered by range
}

func openDemoEngine(ctx context.Context, dir string) (*demoEngine, error) {
	store, err := blob.NewLocal(filepath.Join(dir, "store"))
	if err != nil {
		return nil, err
	}
	logOpts := commitlog.Options{Dir: filepath.Join(dir, "log")}
	log, err := commitlog.Open(ctx, logOpts)
	if err != nil {
		return nil, err
	}
	e := &demoEngine{log: log, opts: tablet.Options{
		Schema:        webtableSchema(),
		Store:         store,
		Dir:           "tables/webtable",
		Log:           log,
		LogOptions:    logOpts,
		Cache:         sstable.NewCache(64 << 20),
		StateStore:    tablet.NewBlobStateStore(store, "state"),
		MemtableBytes: 16 << 20,
	}}
	if err := e.open(ctx, "webtable"); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// open opens tablet id, or its children if it was split.
func (e *demoEngine) open(ctx context.Context, id string) error {
	o := e.opts
	o.ID = id
	t, err := tablet.Open(ctx, o)
	var se *tablet.SplitError
	if errors.As(err, &se) {
		for _, child := range se.Children {
			if err := e.open(ctx, child); err != nil {
				return err
			}
		}
		return nil
	}
	if err != nil {
		return err
	}
	e.tablets = append(e.tablets, t)
	return nil
}

func (e *demoEngine) tabletFor(row []byte) *tablet.Tablet {
	for _, t := range e.tablets {
		if t.Contains(row) {
			return t
		}
	}
	return nil
}

func (e *demoEngine) close() error {
	var errs []error
	for _, t := range e.tablets {
		errs = append(errs, t.Close())
	}
	errs = append(errs, e.log.Close())
	return errors.Join(errs...)
}

func runDemo(ctx context.Context, f demoFlags, out, progress io.Writer) error {
	if f.rows < 1 || f.concurrency < 1 {
		return fmt.Errorf("--rows and --concurrency must be at least 1")
	}
	start := time.Now()
	e, err := openDemoEngine(ctx, f.dir)
	if err != nil {
		return err
	}
	defer e.close()
	fmt.Fprintf(out, "opened %s: %d tablet(s), recovered in %v\n", f.dir, len(e.tablets), time.Since(start).Round(time.Millisecond))

	// Load with concurrent writers: their commits share log flushes.
	gen := webtable.Generator{Seed: f.seed}
	bar := progressbar.NewOptions(f.rows, progressbar.OptionSetWriter(progress),
		progressbar.OptionSetDescription("loading webtable"), progressbar.OptionShowCount(),
		progressbar.OptionShowIts(), progressbar.OptionSetItsString("rows"), progressbar.OptionThrottle(100*time.Millisecond))
	var next atomic.Int64
	var bytesWritten atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, f.concurrency)
	loadStart := time.Now()
	for w := 0; w < f.concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= f.rows || ctx.Err() != nil {
					return
				}
				p := gen.Page(i)
				t := e.tabletFor(p.Key)
				if err := t.Apply(ctx, p.Mutation); err != nil {
					errs <- fmt.Errorf("write %s: %w", p.Key, err)
					return
				}
				bytesWritten.Add(int64(p.Mutation.Size()))
				bar.Add(1)
			}
		}()
	}
	wg.Wait()
	bar.Finish()
	fmt.Fprintln(progress)
	select {
	case err := <-errs:
		return err
	default:
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	el := time.Since(loadStart)
	fmt.Fprintf(out, "loaded %d rows (%.1f MB) in %v: %.0f rows/s, every write durable in the commit log\n",
		f.rows, float64(bytesWritten.Load())/1e6, el.Round(time.Millisecond), float64(f.rows)/el.Seconds())

	// The paper's Figure 1 row.
	key := []byte("com.cnn.www")
	row, ok, err := e.tabletFor(key).ReadRow(ctx, key, tablet.ReadOptions{})
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("row %s not found after loading it", key)
	}
	fmt.Fprintf(out, "\nrow %s:\n", row.Key)
	for _, c := range row.Cells {
		v := string(c.Value)
		if len(v) > 60 {
			v = v[:60] + "…"
		}
		fmt.Fprintf(out, "  %s:%s @%s  %q\n", c.Family, c.Qualifier, time.UnixMicro(c.Timestamp).UTC().Format(time.DateOnly), v)
	}

	// Scan one site, as a crawler's analysis would.
	n, cells := 0, 0
	for _, t := range e.tablets {
		err := t.Scan(ctx, tablet.ScanOptions{Start: []byte("com.cnn.www/"), End: []byte("com.cnn.www0"),
			ReadOptions: tablet.ReadOptions{Families: []string{webtable.FamilyAnchor}}}, func(r cell.Row) error {
			n++
			cells += len(r.Cells)
			return nil
		})
		if err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "\nscan com.cnn.www/…: %d pages referenced by %d anchors\n", n, cells)

	// Major compaction, then a split that shares the SSTables by reference.
	t := e.tablets[len(e.tablets)-1]
	cstart := time.Now()
	if err := t.Compact(ctx, true); err != nil {
		return err
	}
	st := t.Stats()
	fmt.Fprintf(out, "\nmajor compaction of %s in %v:", t.ID(), time.Since(cstart).Round(time.Millisecond))
	for g, gs := range st.Groups {
		fmt.Fprintf(out, " group %s: %d SSTable(s), %.1f MB;", g, gs.SSTables, float64(gs.Bytes)/1e6)
	}
	fmt.Fprintln(out)
	res, err := t.Split(ctx)
	if errors.Is(err, tablet.ErrCannotSplit) {
		fmt.Fprintln(out, "tablet too small to split")
		return nil
	}
	if err != nil {
		return err
	}
	e.tablets = e.tablets[:len(e.tablets)-1]
	for _, child := range []tablet.State{res.Left, res.Right} {
		if err := e.open(ctx, child.ID); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "split %s at %q into %s and %s; both reference the same %d SSTable(s), no data copied\n",
		t.ID(), res.Key, res.Left.ID, res.Right.ID, len(res.Left.Files()))
	fmt.Fprintf(out, "\n%d tablet(s) now; run again with the same --dir to see them recovered\n", len(e.tablets))
	return nil
}
