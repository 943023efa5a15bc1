package main

// The cbt-style data and admin verbs. They use only the official Cloud
// Bigtable Go client, so they work against tabula dev, a Tabula cluster,
// the Cloud Bigtable emulator, or anything else that speaks the API.

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/api/option"
	rpccode "google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/security/auth"
	"github.com/tabuladb/tabula/security/tlsconfig"
	"github.com/tabuladb/tabula/storage/master"
)

// defaultAddr is where the verbs look for a server when neither --addr
// nor TABULA_ADDR says otherwise.
const defaultAddr = "127.0.0.1:8086"

// maxMessageSize matches what Cloud Bigtable accepts, so large rows and
// bulk batches are not refused by the client's 4 MiB default.
const maxMessageSize = 256 << 20

// connFlags are the flags every client verb takes.
type connFlags struct {
	addr     string
	project  string
	instance string
	tls      clientTLSFlags
	token    string // bearer token (servers with authentication on)
}

func (c *connFlags) register(fs *pflag.FlagSet) {
	addr := os.Getenv("TABULA_ADDR")
	if addr == "" {
		addr = defaultAddr
	}
	fs.StringVar(&c.addr, "addr", addr, "server address host:port (default from $TABULA_ADDR)")
	fs.StringVar(&c.project, "project", "tabula", "project of the table names (projects/P/instances/I/tables/T)")
	fs.StringVar(&c.instance, "instance", "dev", "instance of the table names")
	c.tls.register(fs)
	fs.StringVar(&c.token, "token", os.Getenv(auth.TokenEnv), "bearer token for servers with authentication on: a JWT or a token of their token file (default from $"+auth.TokenEnv+")")
}

// conn is an open connection: the data and admin clients share one
// gRPC channel.
type conn struct {
	cc    *grpc.ClientConn
	data  *bigtable.Client
	admin *bigtable.AdminClient
	names connFlags   // address, project and instance, for resource names
	tls   *tls.Config // what cc was dialed with (nil: plaintext), for the connections Tabula's client dials itself
}

// dial connects to c.addr, over TLS when --tls-ca, --tls-cert or
// --tls-key (or their environment variables) say so, else in plaintext as
// the emulator mechanism of the official clients does.
func (c connFlags) dial(ctx context.Context) (*conn, error) {
	tc, err := c.tls.config()
	if err != nil {
		return nil, err
	}
	opts := []grpc.DialOption{
		tlsconfig.DialOption(tc),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageSize), grpc.MaxCallSendMsgSize(maxMessageSize)),
	}
	if c.token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(auth.BearerToken(c.token)))
	}
	cc, err := grpc.NewClient(c.addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", c.addr, err)
	}
	// Metrics export and the session data plane would look for Google
	// credentials and open side channels; a plain endpoint has neither.
	data, err := bigtable.NewClientWithConfig(ctx, c.project, c.instance,
		bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}, DisableSession: true},
		option.WithGRPCConn(cc))
	if err != nil {
		cc.Close()
		return nil, fmt.Errorf("data client for %s: %w", c.addr, err)
	}
	admin, err := bigtable.NewAdminClient(ctx, c.project, c.instance, option.WithGRPCConn(cc))
	if err != nil {
		data.Close()
		cc.Close()
		return nil, fmt.Errorf("admin client for %s: %w", c.addr, err)
	}
	return &conn{cc: cc, data: data, admin: admin, names: c, tls: tc}, nil
}

// sessionClient returns an official data client that dials c's server
// itself, with tc's TLS (nil: plaintext) and c's token, as applications
// outside the emulator mechanism do: unlike the clients of dial, whose
// connection is given to them, it builds the session data plane and sends
// its single-row reads and writes on sessions when the server's client
// configuration says so.
func (c connFlags) sessionClient(ctx context.Context, tc *tls.Config) (*bigtable.Client, error) {
	opts := []option.ClientOption{option.WithEndpoint(c.addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(tlsconfig.DialOption(tc)),
		option.WithGRPCDialOption(grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageSize), grpc.MaxCallSendMsgSize(maxMessageSize)))}
	if c.token != "" {
		opts = append(opts, option.WithGRPCDialOption(grpc.WithPerRPCCredentials(auth.BearerToken(c.token))))
	}
	// The official client reads BIGTABLE_EMULATOR_HOST itself while it
	// is built: when the variable is set it dials that address in
	// plaintext on a connection of its own, whatever the endpoint and TLS
	// options say, and builds no session data plane. deploy/local's env
	// file exports it for the tools that connect that way, so this client,
	// meant to dial c.addr itself, must be built without it.
	if host, ok := os.LookupEnv(emulatorHostEnv); ok {
		os.Unsetenv(emulatorHostEnv)
		defer os.Setenv(emulatorHostEnv, host)
	}
	data, err := bigtable.NewClientWithConfig(ctx, c.project, c.instance,
		bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}, DisableDirectAccess: true}, opts...)
	if err != nil {
		return nil, fmt.Errorf("data client for %s: %w", c.addr, err)
	}
	return data, nil
}

// emulatorHostEnv is the variable by which the official clients are
// pointed at an emulator (or at Tabula, which serves the same way).
const emulatorHostEnv = "BIGTABLE_EMULATOR_HOST"

// Close closes both clients and the channel. Whether a client closes a
// channel given with WithGRPCConn has varied between client versions, so
// the channel is closed here too, last; a second close only returns an
// error, which is ignored.
func (c *conn) Close() error {
	c.data.Close()
	c.admin.Close()
	c.cc.Close()
	return nil
}

// describe renders an RPC error as "CODE: message", the form the server
// and Cloud Bigtable document, and leaves other errors alone.
func describe(err error) error {
	if err == nil {
		return nil
	}
	if st, ok := status.FromError(err); ok && st.Code() != 0 {
		return fmt.Errorf("%s: %s", rpccode.Code(st.Code()).String(), st.Message())
	}
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		st := se.GRPCStatus()
		return fmt.Errorf("%s: %s", rpccode.Code(st.Code()).String(), st.Message())
	}
	return err
}

// usageError is a mistake in the command line; it carries the verb's
// usage line as a hint.
type usageError struct {
	cmd *cobra.Command
	err error
}

func (e *usageError) Error() string {
	return fmt.Sprintf("%v\nusage: %s (see %s --help)", e.err, e.cmd.UseLine(), e.cmd.CommandPath())
}

func (e *usageError) Unwrap() error { return e.err }

func usagef(cmd *cobra.Command, format string, args ...any) error {
	return &usageError{cmd: cmd, err: fmt.Errorf(format, args...)}
}

// argsBetween checks the number of positional arguments with a usage hint.
func argsBetween(lo, hi int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < lo {
			return usagef(cmd, "missing arguments")
		}
		if hi >= 0 && len(args) > hi {
			return usagef(cmd, "too many arguments: %q", args[hi:])
		}
		return nil
	}
}

// clientVerb wraps a verb's body: connection flags, a connection, errors
// rendered with their gRPC code, usage errors with a hint.
type clientVerb struct {
	use, short, long string
	args             cobra.PositionalArgs
	run              func(ctx context.Context, c *conn, cmd *cobra.Command, args []string) error
	flags            func(fs *pflag.FlagSet)
	// streams marks verbs whose run time grows with the data (read,
	// count): they get no default deadline. Those whose stream the
	// official client retries (ReadRows) call conn.reachable first.
	streams bool
}

// defaultTimeout bounds the verbs that do not stream, so a server that is
// down is an UNAVAILABLE error instead of the client retrying forever.
const defaultTimeout = 30 * time.Second

// reachTimeout bounds the streaming verbs' reachability check: as long as
// a unary verb waits for a server that is down (a variable so that tests
// can shorten it).
var reachTimeout = defaultTimeout

// reachable checks, before a streaming verb starts its stream, that a
// server answers at c's address, waiting at most within for one. The
// verbs call it once their arguments are checked, so that a usage error
// needs no server.
//
// A streaming verb has no default deadline, since a long scan must never
// be cut off; but the official client retries UNAVAILABLE in ReadRows
// until its context ends, so without a deadline read and count against a
// server that is down retried forever, printing nothing. Two ways out
// were weighed: a deadline on the first response, and a short unary call
// first. The first is not what it seems: the official client hands over
// rows, not responses, and a scan whose filter keeps few rows (regex=,
// count of a sparse range) may rightly go a long time without one. So
// the verbs ask first: one PingAndWarm, which does no work on the server,
// waiting for the connection (WaitForReady) as the unary verbs' retries
// do, for at most within. Any answer proves the server reachable, an
// error too (UNIMPLEMENTED from a server without PingAndWarm,
// UNAUTHENTICATED, NOT_FOUND for an unknown instance): the verb itself
// then reports what is wrong. Only no answer at all within the time is an
// error here. Once the stream runs, nothing bounds it; a server that goes
// away in the middle of a scan is retried by the client as before. Verbs
// that stream through Tabula's own client (script run, read --where) or
// start with a unary call (restore) need no check: those fail at once
// with UNAVAILABLE.
func (c *conn) reachable(ctx context.Context, within time.Duration) error {
	pctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	name := fmt.Sprintf("projects/%s/instances/%s", c.names.project, c.names.instance)
	_, err := bigtablepb.NewBigtableClient(c.cc).PingAndWarm(pctx, &bigtablepb.PingAndWarmRequest{Name: name}, grpc.WaitForReady(true))
	if err == nil || pctx.Err() == nil {
		return nil // an answer, whatever it says
	}
	if ctx.Err() != nil {
		return err // the caller's --timeout or an interrupt, not the check's
	}
	return status.Errorf(codes.Unavailable, "no answer from %s within %s (is the server running?): %s", c.names.addr, within, status.Convert(err).Message())
}

func (v clientVerb) command() *cobra.Command {
	var cf connFlags
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   v.use,
		Short: v.short,
		Long:  v.long,
		Args:  v.args,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			c, err := cf.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			if err := v.run(ctx, c, cmd, args); err != nil {
				var ue *usageError
				if errors.As(err, &ue) {
					return err
				}
				if errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded {
					// The client retries UNAVAILABLE until the deadline,
					// so a server that is down ends up here.
					return fmt.Errorf("%s: DEADLINE_EXCEEDED: no answer from %s within --timeout %s (is the server running?)", cmd.Name(), cf.addr, timeout)
				}
				return fmt.Errorf("%s: %w", cmd.Name(), describe(err))
			}
			return nil
		},
	}
	cf.register(cmd.Flags())
	dt := defaultTimeout
	if v.streams {
		dt = 0
	}
	cmd.Flags().DurationVar(&timeout, "timeout", dt, "give up after this long (0: never)")
	if v.flags != nil {
		v.flags(cmd.Flags())
	}
	cmd.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return &usageError{cmd: cmd, err: err}
	})
	return cmd
}

// newCLICommands returns the cbt-style verbs.
func newCLICommands() []*cobra.Command {
	var maxValue int
	valueFlag := func(fs *pflag.FlagSet) {
		fs.IntVar(&maxValue, "max-value", 120, "print at most this many bytes of each value (0: all)")
	}
	var where string // read --where FILE: script.go
	var purge bool   // deletetable --purge
	verbs := []clientVerb{
		{
			use:   "ls [TABLE]",
			short: "List tables, or a table's families, GC policies and locality groups",
			args:  argsBetween(0, 1),
			run: func(ctx context.Context, c *conn, cmd *cobra.Command, args []string) error {
				if len(args) == 0 {
					return listTables(ctx, c, cmd.OutOrStdout())
				}
				return listFamilies(ctx, c, cmd.OutOrStdout(), args[0])
			},
		},
		{
			use:   "createtable TABLE [families=F1[:agg=KIND][:GCPOLICY],F2...] [splits=K1,K2...]",
			short: "Create a table, optionally with families and initial splits",
			long: `createtable creates a table. families= lists families, each with an optional
GC policy after a colon (families=contents:maxversions=3,anchor);
agg=sum, agg=min, agg=max or agg=hll right after a family's name makes it an
aggregate family over Int64 input (families=hits:agg=sum,visitors:agg=hll);
splits= lists initial split keys (splits=g,n,t).`,
			args: argsBetween(1, 3),
			run: func(ctx context.Context, c *conn, cmd *cobra.Command, args []string) error {
				kv, err := parseKeyValues(args[1:], "families", "splits")
				if err != nil {
					return usagef(cmd, "%v", err)
				}
				splits, err := parseSplits(kv["splits"])
				if err != nil {
					return usagef(cmd, "%v", err)
				}
				conf := &bigtable.TableConf{TableID: args[0], SplitKeys: splits}
				if s, ok := kv["families"]; ok {
					fams, err := parseFamilies(s)
					if err != nil {
						return usagef(cmd, "%v", err)
					}
					conf.ColumnFamilies = map[string]bigtable.Family{}
					for _, f := range fams {
						conf.ColumnFamilies[f.Name] = bigtable.Family{GCPolicy: f.Policy, ValueType: f.Type}
					}
				}
				return c.admin.CreateTableFromConf(ctx, conf)
			},
		},
		{
			use:   "deletetable TABLE [--purge]",
			short: "Delete a table and all its data",
			long: `deletetable deletes TABLE. Tabula keeps a deleted table restorable (tabula
undelete) for the server's --undelete-retention, its name taken meanwhile;
--purge deletes it at once instead (Tabula only).`,
			args: argsBetween(1, 1),
			flags: func(fs *pflag.FlagSet) {
				fs.BoolVar(&purge, "purge", false, "delete at once: not restorable, the name free again (Tabula only)")
			},
			run: func(ctx context.Context, c *conn, _ *cobra.Command, args []string) error {
				if purge {
					ctx = master.WithPurge(ctx)
				}
				return c.admin.DeleteTable(ctx, args[0])
			},
		},
		{
			use:   "createfamily TABLE FAMILY[:agg=KIND][:GCPOLICY]",
			short: "Create a column family",
			args:  argsBetween(2, 2),
			run: func(ctx context.Context, c *conn, cmd *cobra.Command, args []string) error {
				f, err := parseFamily(args[1])
				if err != nil {
					if name, _, _ := strings.Cut(args[1], ":"); strings.Contains(name, ",") {
						return usagef(cmd, "%v; createfamily creates one family (createtable's families= takes a list)", err)
					}
					return usagef(cmd, "%v", err)
				}
				return c.admin.CreateColumnFamilyWithConfig(ctx, args[0], f.Name, bigtable.Family{GCPolicy: f.Policy, ValueType: f.Type})
			},
		},
		{
			use:   "deletefamily TABLE FAMILY",
			short: "Delete a column family and all its cells",
			args:  argsBetween(2, 2),
			run: func(ctx context.Context, c *conn, _ *cobra.Command, args []string) error {
				return c.admin.DeleteColumnFamily(ctx, args[0], args[1])
			},
		},
		{
			use:   "setgcpolicy TABLE FAMILY (never | maxversions=N | maxage=DUR | POLICY and POLICY | POLICY or POLICY)",
			short: "Set a family's garbage-collection policy",
			long: `setgcpolicy sets the GC policy of a family. Policies combine with "and"
(both must hold to collect) and "or" (either), "and" binding tighter, with
parentheses: setgcpolicy T f "maxage=30d or maxversions=2". Durations take
d, h, m, s units (1d12h).`,
			args: argsBetween(3, -1),
			run: func(ctx context.Context, c *conn, cmd *cobra.Command, args []string) error {
				pol, err := parseGCPolicy(strings.Join(args[2:], " "))
				if err != nil {
					return usagef(cmd, "%v", err)
				}
				return c.admin.SetGCPolicy(ctx, args[0], args[1], pol)
			},
		},
		{
			use:   "set TABLE ROW FAMILY:COLUMN[@TIMESTAMP]=VALUE...",
			short: "Write cells of one row, atomically",
			long: `set writes one or more cells of a row in one atomic mutation. A timestamp is
in microseconds since the epoch; without one the server assigns it.`,
			args: argsBetween(3, -1),
			run: func(ctx context.Context, c *conn, cmd *cobra.Command, args []string) error {
				mut := bigtable.NewMutation()
				for _, a := range args[2:] {
					cs, err := parseCellSet(a)
					if err != nil {
						return usagef(cmd, "%v", err)
					}
					mut.Set(cs.Family, cs.Qualifier, cs.Timestamp, []byte(cs.Value))
				}
				return c.data.Open(args[0]).Apply(ctx, args[1], mut)
			},
		},
		{
			use:   "lookup TABLE ROW [columns=F[:C],...] [versions=N]",
			short: "Read one row",
			args:  argsBetween(2, 4),
			flags: valueFlag,
			run: func(ctx context.Context, c *conn, cmd *cobra.Command, args []string) error {
				kv, err := parseKeyValues(args[2:], "columns", "versions")
				if err != nil {
					return usagef(cmd, "%v", err)
				}
				f, err := readFilter(kv)
				if err != nil {
					return usagef(cmd, "%v", err)
				}
				var opts []bigtable.ReadOption
				if f != nil {
					opts = append(opts, bigtable.RowFilter(f))
				}
				row, err := c.data.Open(args[0]).ReadRow(ctx, args[1], opts...)
				if err != nil {
					return err
				}
				if row.Key() == "" {
					fmt.Fprintf(cmd.ErrOrStderr(), "no row %q in %s\n", args[1], args[0])
					return nil
				}
				w := bufio.NewWriter(cmd.OutOrStdout())
				printRow(w, row, maxValue)
				return w.Flush()
			},
		},
		{
			use:     "read TABLE [start=ROW] [end=ROW] [prefix=P] [regex=RE] [count=N] [columns=F[:C],...] [versions=N] [--where FILE]",
			short:   "Read rows, streaming; --where keeps the rows a filter script selects",
			streams: true,
			args:    argsBetween(1, -1),
			flags: func(fs *pflag.FlagSet) {
				valueFlag(fs)
				fs.StringVar(&where, "where", "", "filter script: print only the rows it keeps (run inside the servers)")
			},
			run: func(ctx context.Context, c *conn, cmd *cobra.Command, args []string) error {
				kv, err := parseKeyValues(args[1:], "start", "end", "prefix", "regex", "count", "columns", "versions")
				if err != nil {
					return usagef(cmd, "%v", err)
				}
				rng, err := readRange(kv)
				if err != nil {
					return usagef(cmd, "%v", err)
				}
				f, err := readFilter(kv)
				if err != nil {
					return usagef(cmd, "%v", err)
				}
				var opts []bigtable.ReadOption
				if f != nil {
					opts = append(opts, bigtable.RowFilter(f))
				}
				if s, ok := kv["count"]; ok {
					n, err := parsePositiveInt("count", s)
					if err != nil {
						return usagef(cmd, "%v", err)
					}
					opts = append(opts, bigtable.LimitRows(int64(n)))
				}
				if where != "" {
					n, _ := strconv.Atoi(kv["count"])
					return readWhere(ctx, c, cmd, args[0], where, kv, n, maxValue)
				}
				if err := c.reachable(ctx, reachTimeout); err != nil {
					return err
				}
				w := bufio.NewWriter(cmd.OutOrStdout())
				err = c.data.Open(args[0]).ReadRows(ctx, rng, func(r bigtable.Row) bool {
					printRow(w, r, maxValue)
					// Flush per row so a long scan streams to a pager
					// or a pipe instead of arriving in 4 KiB lumps.
					return w.Flush() == nil
				}, opts...)
				if ferr := w.Flush(); err == nil {
					err = ferr
				}
				return err
			},
		},
		{
			use:     "count TABLE [prefix=P] [start=ROW] [end=ROW]",
			short:   "Count rows, streaming",
			streams: true,
			args:    argsBetween(1, 4),
			run: func(ctx context.Context, c *conn, cmd *cobra.Command, args []string) error {
				kv, err := parseKeyValues(args[1:], "prefix", "start", "end")
				if err != nil {
					return usagef(cmd, "%v", err)
				}
				rng, err := readRange(kv)
				if err != nil {
					return usagef(cmd, "%v", err)
				}
				if err := c.reachable(ctx, reachTimeout); err != nil {
					return err
				}
				n, err := countRows(ctx, c.data.Open(args[0]), rng)
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), n)
				return nil
			},
		},
		{
			use:   "deleterow TABLE ROW",
			short: "Delete every cell of a row",
			args:  argsBetween(2, 2),
			run: func(ctx context.Context, c *conn, _ *cobra.Command, args []string) error {
				mut := bigtable.NewMutation()
				mut.DeleteRow()
				return c.data.Open(args[0]).Apply(ctx, args[1], mut)
			},
		},
		{
			use:   "deleteallrows TABLE",
			short: "Delete every row of a table, keeping its schema",
			args:  argsBetween(1, 1),
			run: func(ctx context.Context, c *conn, _ *cobra.Command, args []string) error {
				return c.admin.DropAllRows(ctx, args[0])
			},
		},
	}
	cmds := make([]*cobra.Command, 0, len(verbs))
	for _, v := range verbs {
		cmds = append(cmds, v.command())
	}
	cmds = append(cmds, newACLCommands()...)
	cmds = append(cmds, newBackupCommands()...)
	return append(append(cmds, newSetLocalityGroupCommand()), newTabletCommands()...)
}

// countRows counts the rows of rng, asking the server for one stripped
// cell per row so only keys cross the wire.
func countRows(ctx context.Context, tbl *bigtable.Table, rng bigtable.RowSet) (int64, error) {
	var n int64
	err := tbl.ReadRows(ctx, rng, func(bigtable.Row) bool {
		n++
		return true
	}, bigtable.RowFilter(bigtable.ChainFilters(bigtable.CellsPerRowLimitFilter(1), bigtable.StripValueFilter())))
	return n, err
}

func listTables(ctx context.Context, c *conn, w io.Writer) error {
	tables, err := c.admin.Tables(ctx)
	if err != nil {
		return err
	}
	slices.Sort(tables)
	for _, t := range tables {
		fmt.Fprintln(w, t)
	}
	return nil
}

func listFamilies(ctx context.Context, c *conn, w io.Writer, table string) error {
	info, err := c.admin.TableInfo(ctx, table)
	if err != nil {
		return err
	}
	fams := slices.Clone(info.FamilyInfos)
	slices.SortFunc(fams, func(a, b bigtable.FamilyInfo) int { return strings.Compare(a.Name, b.Name) })
	// A Type column only when a family has a value type (an aggregate
	// family): cbt's two columns otherwise.
	typed := slices.ContainsFunc(fams, func(f bigtable.FamilyInfo) bool { return typeName(f.ValueType) != "" })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if typed {
		fmt.Fprintln(tw, "Family Name\tGC Policy\tType")
		fmt.Fprintln(tw, "-----------\t---------\t----")
	} else {
		fmt.Fprintln(tw, "Family Name\tGC Policy")
		fmt.Fprintln(tw, "-----------\t---------")
	}
	for _, f := range fams {
		pol := f.GCPolicy
		if pol == "" {
			pol = "<never>"
		}
		if typed {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Name, pol, typeName(f.ValueType))
		} else {
			fmt.Fprintf(tw, "%s\t%s\n", f.Name, pol)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	groups, ok, err := localityGroups(ctx, c, table)
	if err != nil || !ok {
		return err
	}
	fmt.Fprintln(w)
	return printLocalityGroups(w, groups)
}

// rowSeparator starts every row in read and lookup output, as in cbt.
const rowSeparator = "----------------------------------------"

// printRow prints a row as cbt does: a separator, the key, then per cell
// "  family:column  @ time" and the quoted value on the next line.
// Values longer than maxValue bytes are cut, with their length noted, so
// a page of HTML does not flood the terminal.
func printRow(w io.Writer, r bigtable.Row, maxValue int) {
	fmt.Fprintln(w, rowSeparator)
	fmt.Fprintln(w, r.Key())
	fams := make([]string, 0, len(r))
	for f := range r {
		fams = append(fams, f)
	}
	slices.Sort(fams)
	for _, f := range fams {
		for _, item := range r[f] {
			fmt.Fprintf(w, "  %-40s @ %s\n", item.Column, formatTimestamp(item.Timestamp))
			fmt.Fprintf(w, "    %s\n", formatValue(item.Value, maxValue))
		}
	}
}

// formatTimestamp prints a cell timestamp in UTC with microseconds.
func formatTimestamp(ts bigtable.Timestamp) string {
	return ts.Time().UTC().Format("2006/01/02-15:04:05.000000")
}

// formatValue quotes a value, cut to maxValue bytes (0: no limit).
func formatValue(v []byte, maxValue int) string {
	if maxValue > 0 && len(v) > maxValue {
		return strconv.Quote(string(v[:maxValue])) + fmt.Sprintf("... (%d bytes)", len(v))
	}
	return strconv.Quote(string(v))
}
