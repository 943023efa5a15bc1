package main

// tabula script: check a script, run it inside the servers. And the
// script half of `tabula read --where`.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tabuladb/tabula/scripts"
	"github.com/tabuladb/tabula/storage/client"
)

func newScriptCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "script",
		Short: "Check scripts and run them inside the tablet servers",
		Long: `script checks and runs scripts of Tabula's Sawzall dialect (see the scripts
package documentation): one row at a time, output only through emit into
aggregator tables, run next to the data under limits.`,
	}
	cmd.AddCommand(newScriptCheckCommand(), newScriptRunCommand())
	return cmd
}

// errCheckFailed makes `script check` exit 1 once the diagnostics are
// printed.
var errCheckFailed = errors.New("script check found errors")

func newScriptCheckCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "check FILE...",
		Short: "Type-check scripts; print every error as FILE:LINE:COL: message",
		Args:  argsBetween(1, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			failed := 0
			out := cmd.OutOrStdout()
			for _, file := range args {
				_, err := compileFile(file)
				if err == nil && len(args) == 1 {
					fmt.Fprintln(out, "ok")
				}
				if err == nil {
					if len(args) > 1 {
						fmt.Fprintf(out, "%s: ok\n", file)
					}
					continue
				}
				failed++
				printCompileError(out, file, err)
			}
			if failed > 0 {
				return fmt.Errorf("%w in %d of %s", errCheckFailed, failed, nOf(len(args), "file", "files"))
			}
			return nil
		},
	}
}

// compileFile reads and compiles a script, named by its file.
func compileFile(file string) (*scripts.Program, error) {
	src, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return scripts.Compile(file, string(src))
}

// printCompileError prints a compile error one FILE:LINE:COL: message
// line per diagnostic, or the error as it is when it is not one.
func printCompileError(w io.Writer, file string, err error) {
	var ce *scripts.CompileError
	if !errors.As(err, &ce) {
		fmt.Fprintf(w, "%s: %v\n", file, err)
		return
	}
	for _, d := range ce.Diagnostics {
		fmt.Fprintf(w, "%s:%d:%d: %s\n", file, d.Line, d.Col, d.Msg)
	}
}

// scriptRunFlags are `script run`'s flags beyond the connection's.
type scriptRunFlags struct {
	table, prefix, start, end, format string
	steps, memory                     int64
	wall                              time.Duration
	stats                             bool
}

func newScriptRunCommand() *cobra.Command {
	var f scriptRunFlags
	v := clientVerb{
		use:   "run FILE --table T [--prefix P | --start K --end K] [--format text|json]",
		short: "Run a script inside the tablet servers over a table's rows and print its tables",
		long: `run compiles the script, runs it server-side over the rows of the range (each
server over the tablets it holds), merges the servers' partial aggregates
and prints the tables: as text, one line per value (name[index] = value),
or as JSON, one object mapping each table's name to an array of entries
{"key": [index values...], "value": ...}. Rows a filter script keeps are
read with "tabula read TABLE --where FILE".`,
		args:    argsBetween(1, 1),
		streams: true,
		flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&f.table, "table", "", "table to run over (required)")
			fs.StringVar(&f.prefix, "prefix", "", "only rows starting with this prefix")
			fs.StringVar(&f.start, "start", "", "first row of the range")
			fs.StringVar(&f.end, "end", "", "row after the range (exclusive)")
			fs.StringVar(&f.format, "format", "text", "output: text or json")
			fs.Int64Var(&f.steps, "max-steps", 0, "steps per row (0: the server's default; servers clamp to their maximum)")
			fs.Int64Var(&f.memory, "max-memory", 0, "bytes per row plus table state (0: the server's default)")
			fs.DurationVar(&f.wall, "max-time", 0, "wall time per server (0: the server's default)")
			fs.BoolVar(&f.stats, "stats", false, "print rows, steps and runs to stderr")
		},
		run: func(ctx context.Context, c *conn, cmd *cobra.Command, args []string) error {
			return runScriptVerb(ctx, c, cmd, args[0], f)
		},
	}
	return v.command()
}

func runScriptVerb(ctx context.Context, c *conn, cmd *cobra.Command, file string, f scriptRunFlags) error {
	if f.table == "" {
		return usagef(cmd, "--table is required")
	}
	if f.format != "text" && f.format != "json" {
		return usagef(cmd, "--format %q: want text or json", f.format)
	}
	if f.prefix != "" && (f.start != "" || f.end != "") {
		return usagef(cmd, "--prefix cannot be combined with --start or --end")
	}
	if f.start != "" && f.end != "" && f.start >= f.end {
		return usagef(cmd, "--start %q is not before --end %q", f.start, f.end)
	}
	src, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var stats client.ScriptStats
	opts := client.ScriptOptions{
		Name: file, Start: []byte(f.start), End: []byte(f.end), Prefix: []byte(f.prefix),
		Limits: scripts.Limits{Steps: f.steps, Memory: f.memory, Time: f.wall},
		Stats:  &stats,
	}
	res, err := c.scripts().RunScript(ctx, f.table, string(src), opts)
	if err != nil {
		return compileOrRPCError(cmd, file, err)
	}
	w := bufio.NewWriter(cmd.OutOrStdout())
	if f.format == "json" {
		b, err := res.MarshalJSON()
		if err != nil {
			return err
		}
		w.Write(b)
		w.WriteByte('\n')
	} else if err := res.WriteText(w); err != nil {
		return err
	}
	if f.stats {
		fmt.Fprintf(cmd.ErrOrStderr(), "%s: %d rows scanned, %d processed, %d steps, %d server runs\n",
			file, stats.RowsScanned, stats.Rows, stats.Steps, stats.Runs)
	}
	return w.Flush()
}

// compileOrRPCError prints a compile error's diagnostics (to stderr) and
// returns a short error; other errors are returned as they are.
func compileOrRPCError(cmd *cobra.Command, file string, err error) error {
	var ce *scripts.CompileError
	if errors.As(err, &ce) {
		printCompileError(cmd.ErrOrStderr(), file, err)
		return fmt.Errorf("%s: %s", file, nOf(len(ce.Diagnostics), "error", "errors"))
	}
	return err
}

// nOf renders a count with its noun in the right number: "1 error",
// "2 errors" (one and many are the singular and plural forms).
func nOf(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

// scripts returns Tabula's script client over the connection's channel.
func (c *conn) scripts() *client.Client {
	return client.New(c.cc, client.Options{Project: c.names.project, Instance: c.names.instance, TLS: c.tls, Token: c.names.token})
}

// readWhere is `read TABLE ... --where FILE`: the rows of the range for
// which the filter script file decides keep, with the cells of the
// columns=/versions=/regex= filter (which the script sees first),
// printed as read prints rows, at most limit of them (0: all).
func readWhere(ctx context.Context, c *conn, cmd *cobra.Command, table, file string, kv map[string]string, limit int, maxValue int) error {
	src, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	rf, err := readFilterProto(kv)
	if err != nil {
		return usagef(cmd, "%v", err)
	}
	opts := client.ScriptOptions{Name: file, Filter: rf, Prefix: []byte(kv["prefix"]), Start: []byte(kv["start"]), End: []byte(kv["end"])}
	w := bufio.NewWriter(cmd.OutOrStdout())
	n := 0
	var werr error
	_, err = c.scripts().FilterRows(ctx, table, string(src), opts, func(r client.Row) bool {
		printRow(w, toBigtableRow(r), maxValue)
		n++
		// Flush per row, as read does, so a long scan streams.
		werr = w.Flush()
		return werr == nil && (limit == 0 || n < limit)
	})
	if err != nil {
		return compileOrRPCError(cmd, file, err)
	}
	if werr != nil {
		return werr
	}
	return w.Flush()
}

// toBigtableRow converts a kept row to the official client's shape, so
// read --where prints exactly as read does.
func toBigtableRow(r client.Row) bigtable.Row {
	out := bigtable.Row{}
	for _, c := range r.Cells {
		out[c.Family] = append(out[c.Family], bigtable.ReadItem{
			Row: string(r.Key), Column: c.Family + ":" + string(c.Qualifier),
			Timestamp: bigtable.Timestamp(c.Timestamp), Value: c.Value, Labels: c.Labels,
		})
	}
	return out
}

// readFilterProto is readFilter's filter as the wire message the script
// service takes (the official client keeps its conversion unexported):
// columns= as a union of family(+qualifier) matches, regex= on the row
// key, versions= as a per-column limit, chained; nil when none is given.
func readFilterProto(kv map[string]string) (*bigtablepb.RowFilter, error) {
	chain := func(fs []*bigtablepb.RowFilter) *bigtablepb.RowFilter {
		if len(fs) == 1 {
			return fs[0]
		}
		return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_Chain_{Chain: &bigtablepb.RowFilter_Chain{Filters: fs}}}
	}
	// readFilter validates the same arguments with the same messages.
	if _, err := readFilter(kv); err != nil {
		return nil, err
	}
	var fs []*bigtablepb.RowFilter
	if s, ok := kv["columns"]; ok {
		cols, err := parseColumns(s)
		if err != nil {
			return nil, err
		}
		var union []*bigtablepb.RowFilter
		for _, col := range cols {
			f := &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_FamilyNameRegexFilter{FamilyNameRegexFilter: col.Family}}
			if col.Qualifier != "" {
				f = chain([]*bigtablepb.RowFilter{f, {Filter: &bigtablepb.RowFilter_ColumnQualifierRegexFilter{ColumnQualifierRegexFilter: []byte(col.Qualifier)}}})
			}
			union = append(union, f)
		}
		if len(union) == 1 {
			fs = append(fs, union[0])
		} else {
			fs = append(fs, &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_Interleave_{Interleave: &bigtablepb.RowFilter_Interleave{Filters: union}}})
		}
	}
	if s, ok := kv["regex"]; ok {
		fs = append(fs, &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_RowKeyRegexFilter{RowKeyRegexFilter: []byte(s)}})
	}
	if s, ok := kv["versions"]; ok {
		n, err := parsePositiveInt("versions", s)
		if err != nil {
			return nil, err
		}
		fs = append(fs, &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_CellsPerColumnLimitFilter{CellsPerColumnLimitFilter: int32(n)}})
	}
	if len(fs) == 0 {
		return nil, nil
	}
	return chain(fs), nil
}
