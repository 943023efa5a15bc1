package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/spf13/cobra"

	"github.com/tabuladb/tabula/mapreduce"
	"github.com/tabuladb/tabula/storage/client"
	"github.com/tabuladb/tabula/storage/cluster"
)

// demoScript is a short version of scripts/testdata/webtable.szl: pages
// per language and the sites that link most, summarised inside the server.
const demoScript = `pages: table sum[lang: string] of int;
linkers: table top(5) of site: string weight n: int;
lang: string = "unknown";
for (i: int = 0; i < len(input.cells); i++) {
    c: Cell = input.cells[i];
    if (c.family == "language")
        lang = string(c.value);
    if (c.family == "anchor")
        emit linkers <- string(c.qualifier) weight 1;
}
emit pages[lang] <- 1;
`

type demoFlags struct {
	dir   string
	addr  string
	rows  int
	serve bool
}

func newDemoCommand() *cobra.Command {
	var f demoFlags
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Start tabula dev, load the paper's Webtable, read it back and run a script in the server",
		Long: `demo starts the one-process server (tabula dev) on --dir, loads a synthetic
Webtable (the paper's Figure 1) through the Cloud Bigtable API with the
official Go client, reads com.cnn.www back, scans CNN's pages, and runs a
Sawzall-style script inside the server. With --serve it keeps serving
afterwards, so the other verbs (tabula read, tabula script run, …) can be
tried against it. Run it again on the same --dir and the data is still
there, also after kill -9.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runDemo(ctx, f, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&f.dir, "dir", "", "directory for the server's files (required)")
	cmd.Flags().StringVar(&f.addr, "addr", "127.0.0.1:0", "gRPC address to serve on (port 0 picks a free one)")
	cmd.Flags().IntVar(&f.rows, "rows", 5000, "Webtable rows to load")
	cmd.Flags().BoolVar(&f.serve, "serve", false, "keep serving after the demo until interrupted")
	_ = cmd.MarkFlagRequired("dir")
	return cmd
}

func runDemo(ctx context.Context, f demoFlags, out, progress io.Writer) error {
	if f.rows < 1 {
		return fmt.Errorf("--rows must be at least 1")
	}
	start := time.Now()
	cfg := cluster.DevConfig{
		Dir:  f.dir,
		Addr: f.addr,
		// The demo's own output tells the story; the server logs only
		// warnings and errors.
		Logger: slog.New(slog.NewTextHandler(progress, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	// A MapReduce worker in the server, as tabula dev hosts one by
	// default: `tabula mr run` against the demo's server runs its tasks
	// there, as the README's MapReduce section says.
	stopWorker, err := devWorker(&cfg, &workerFlags{slots: runtime.NumCPU(), sortMemory: mapreduce.DefaultSortMemory})
	if err != nil {
		return err
	}
	defer stopWorker()
	srv, err := cluster.StartDev(ctx, cfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	fmt.Fprintf(out, "tabula dev serving %s on %s (started in %v)\n\n", f.dir, srv.Addr(), time.Since(start).Round(time.Millisecond))

	names := connFlags{addr: srv.Addr(), project: "tabula", instance: "dev"}
	c, err := names.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()

	if _, err := loadWebtable(ctx, c, webtableLoad{table: "webtable", rows: f.rows, seed: 1, sites: 1000, concurrency: 8, batch: 100}, out, progress); err != nil {
		return err
	}

	// The paper's Figure 1 row, read back through the official client.
	tbl := c.data.Open("webtable")
	row, err := tbl.ReadRow(ctx, "com.cnn.www")
	if err != nil {
		return describe(err)
	}
	if len(row) == 0 {
		return fmt.Errorf("row com.cnn.www not found after loading it")
	}
	fmt.Fprintf(out, "\nrow com.cnn.www (the paper's Figure 1):\n")
	for _, fam := range []string{"anchor", "contents", "language"} {
		for _, item := range row[fam] {
			v := string(item.Value)
			if len(v) > 60 {
				v = v[:60] + "…"
			}
			fmt.Fprintf(out, "  %-28s @%s  %q\n", item.Column, item.Timestamp.Time().UTC().Format(time.DateOnly), v)
		}
	}

	// A scan of one site: CNN's pages, anchors only.
	pages, anchors := 0, 0
	err = tbl.ReadRows(ctx, bigtable.PrefixRange("com.cnn.www/"), func(r bigtable.Row) bool {
		pages++
		anchors += len(r["anchor"])
		return true
	}, bigtable.RowFilter(bigtable.FamilyFilter("anchor")))
	if err != nil {
		return describe(err)
	}
	fmt.Fprintf(out, "\nscan com.cnn.www/…: %d pages with %d anchors between them\n", pages, anchors)

	// A script summarising the whole table inside the server.
	sc := client.New(c.cc, client.Options{Project: "tabula", Instance: "dev", TLS: c.tls, Token: c.names.token})
	res, err := sc.RunScript(ctx, "webtable", demoScript, client.ScriptOptions{Name: "demo.szl"})
	if err != nil {
		return describe(err)
	}
	fmt.Fprintf(out, "\nscript run inside the server (pages per language, sites that link most):\n")
	var text strings.Builder
	if err := res.WriteText(&text); err != nil {
		return err
	}
	for _, line := range strings.Split(strings.TrimRight(text.String(), "\n"), "\n") {
		fmt.Fprintf(out, "  %s\n", line)
	}

	if !f.serve {
		fmt.Fprintf(out, "\ndone; run again with --serve to keep the server up and try: tabula read webtable prefix=com.cnn.www count=3 --addr <addr>\n")
		return nil
	}
	fmt.Fprintf(out, "\nserving on %s until interrupted; try:\n  tabula read webtable prefix=com.cnn.www count=3 --addr %s\n  tabula script run scripts/testdata/webtable.szl --table webtable --addr %s\n", srv.Addr(), srv.Addr(), srv.Addr())
	select {
	case <-ctx.Done():
		return nil
	case err := <-srv.Err():
		return err
	}
}
