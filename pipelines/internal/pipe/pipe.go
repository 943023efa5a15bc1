// Package pipe is the plumbing the runnable Beam pipelines (pipelines/*)
// share: their common flags, turning the row-selection flags into a
// beamio.ReadConfig, the checks a pipeline makes against the server
// before it runs, table administration through the official admin
// client, and the main function's exit rules.
package pipe

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/tabuladb/tabula/beamio"
	"github.com/tabuladb/tabula/security/auth"
	"github.com/tabuladb/tabula/security/tlsconfig"
	"github.com/tabuladb/tabula/storage/client"
)

// Conn is a server, the project and instance its tables belong to, and
// the credentials the pipeline reaches it with.
type Conn struct {
	Addr, Project, Instance string
	Auth                    beamio.Credentials
	// sharedProject is Beam's own --project flag (the Dataflow runner's
	// Google Cloud project), which --project then is too: empty, the
	// project is "tabula".
	sharedProject *flag.Flag
}

// Register adds --PREFIXaddr, --PREFIXproject and --PREFIXinstance. When
// the flag set already has the project flag (Beam's, with no prefix), the
// connection uses it rather than defining its own.
func (c *Conn) Register(fs *flag.FlagSet, prefix, what string) {
	def := os.Getenv("TABULA_ADDR")
	if def == "" {
		def = "127.0.0.1:8086"
	}
	fs.StringVar(&c.Addr, prefix+"addr", def, what+"server address host:port (tabula dev or any tablet server of a cluster; default $TABULA_ADDR)")
	if f := fs.Lookup(prefix + "project"); f != nil {
		c.sharedProject = f
	} else {
		fs.StringVar(&c.Project, prefix+"project", "tabula", what+"project of the table names (shared with Beam's --project on Dataflow; default tabula)")
	}
	fs.StringVar(&c.Instance, prefix+"instance", "dev", what+"instance")
	c.RegisterAuth(fs, prefix, what)
}

// RegisterAuth adds the credential flags --PREFIXtls-ca, --PREFIXtls-cert,
// --PREFIXtls-key, --PREFIXtoken and --PREFIXtoken-file (Register adds
// them too).
func (c *Conn) RegisterAuth(fs *flag.FlagSet, prefix, what string) {
	fs.StringVar(&c.Auth.CAFile, prefix+"tls-ca", "", what+"connect over TLS, verifying the server with these PEM CA certificates (a path on the workers; default $"+tlsconfig.EnvCA+")")
	fs.StringVar(&c.Auth.CertFile, prefix+"tls-cert", "", what+"PEM client certificate, for servers that require one (default $"+tlsconfig.EnvCert+")")
	fs.StringVar(&c.Auth.KeyFile, prefix+"tls-key", "", what+"PEM private key of --"+prefix+"tls-cert (default $"+tlsconfig.EnvKey+")")
	fs.StringVar(&c.Auth.Token, prefix+"token", "", what+"bearer token for servers with authentication on; the pipeline reads and writes as its principal (default $"+auth.TokenEnv+"; it travels in the pipeline graph: --"+prefix+"token-file keeps it out)")
	fs.StringVar(&c.Auth.TokenFile, prefix+"token-file", "", what+"file holding the bearer token, read on the workers")
}

// Resolved returns c with its project read from the shared flag.
func (c Conn) Resolved() Conn {
	if c.sharedProject != nil {
		c.Project = c.sharedProject.Value.String()
		c.sharedProject = nil
	}
	if c.Project == "" {
		c.Project = "tabula"
	}
	return c
}

// Table returns the beamio name of table on c.
func (c Conn) Table(table string) beamio.Table {
	c = c.Resolved()
	return beamio.Table{Addr: c.Addr, Project: c.Project, Instance: c.Instance, Table: table, Auth: c.Auth}
}

// Selection is the row and cell selection flags of a reading pipeline.
type Selection struct {
	Start, End, Prefix string
	Families           string
	StartTime, EndTime string
	Filter, ScriptFile string
	BundleBytes        int64
}

// Register adds --start --end --prefix --families --start-time
// --end-time --filter --where --bundle-bytes.
func (s *Selection) Register(fs *flag.FlagSet) {
	fs.StringVar(&s.Start, "start", "", "first row key to read (inclusive)")
	fs.StringVar(&s.End, "end", "", "row key to stop before (exclusive; default: the end of the table)")
	fs.StringVar(&s.Prefix, "prefix-rows", "", "read only the rows starting with this prefix (not with --start/--end)")
	fs.StringVar(&s.Families, "families", "", "comma-separated column families to read (default all)")
	fs.StringVar(&s.StartTime, "start-time", "", "keep cells with timestamps at or after this (RFC 3339 or microseconds)")
	fs.StringVar(&s.EndTime, "end-time", "", "keep cells with timestamps before this (RFC 3339 or microseconds)")
	fs.StringVar(&s.Filter, "filter", "", "a Bigtable RowFilter in protobuf text format, e.g. 'value_regex_filter: \"x.*\"', run in the servers")
	fs.StringVar(&s.ScriptFile, "where", "", "a filter script file (scripts language, one that emits to keep) run inside the tablet servers")
	fs.Int64Var(&s.BundleBytes, "bundle-bytes", beamio.DefaultBundleBytes, "target size of the read's initial restrictions (at least one per tablet)")
}

// ReadConfig turns the selection into a beamio.ReadConfig of table.
func (s Selection) ReadConfig(t beamio.Table) (beamio.ReadConfig, error) {
	cfg := beamio.ReadConfig{Table: t, BundleBytes: s.BundleBytes}
	if s.Prefix != "" {
		if s.Start != "" || s.End != "" {
			return cfg, errors.New("--prefix-rows cannot be combined with --start or --end")
		}
		cfg.Prefixes = [][]byte{[]byte(s.Prefix)}
	} else if s.Start != "" || s.End != "" {
		if s.End != "" && s.Start >= s.End {
			return cfg, fmt.Errorf("--start %q is not before --end %q", s.Start, s.End)
		}
		cfg.Ranges = []beamio.RowRange{{Start: []byte(s.Start), End: []byte(s.End)}}
	}
	if s.Families != "" {
		cfg.Families = strings.Split(s.Families, ",")
	}
	var err error
	if cfg.StartTime, err = ParseTime("--start-time", s.StartTime); err != nil {
		return cfg, err
	}
	if cfg.EndTime, err = ParseTime("--end-time", s.EndTime); err != nil {
		return cfg, err
	}
	if s.Filter != "" {
		f := &bigtablepb.RowFilter{}
		if err := prototext.Unmarshal([]byte(s.Filter), f); err != nil {
			return cfg, fmt.Errorf("--filter: not a RowFilter in protobuf text format: %v", err)
		}
		cfg.Filter = f
	}
	if s.ScriptFile != "" {
		src, err := os.ReadFile(s.ScriptFile)
		if err != nil {
			return cfg, fmt.Errorf("--where: %w", err)
		}
		cfg.Script, cfg.ScriptName = string(src), s.ScriptFile
	}
	return cfg, nil
}

// ParseTime reads a timestamp flag: RFC 3339, or an integer of
// microseconds since the epoch; "" is 0 (unbounded).
func ParseTime(flagName, s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	var us int64
	if _, err := fmt.Sscan(s, &us); err == nil && fmt.Sprint(us) == s {
		return us, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("%s %q: want RFC 3339 (2026-01-02T15:04:05Z) or microseconds since the epoch", flagName, s)
	}
	return t.UnixMicro(), nil
}

// CheckTable asks the server at t.Addr for the table's tablets, so that a
// pipeline fails before it starts when the server is unreachable or the
// table is missing, with a message that says which.
func CheckTable(ctx context.Context, t beamio.Table) ([]client.TabletInfo, error) {
	c, err := t.Dial()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return CheckTableOn(ctx, c, t)
}

// CheckTableOn is CheckTable through c, a client of t's server.
func CheckTableOn(ctx context.Context, c *client.Client, t beamio.Table) ([]client.TabletInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	tabs, err := c.Tablets(ctx, t.Table)
	if err != nil {
		return nil, ServerError(t, err)
	}
	if len(tabs) == 0 {
		return nil, fmt.Errorf("table %s: NOT_FOUND: no such table at %s", t.Table, t.Addr)
	}
	return tabs, nil
}

// ServerError says what failed talking to the server of t.
func ServerError(t beamio.Table, err error) error {
	switch status.Code(err) {
	case codes.NotFound:
		return fmt.Errorf("table %s: NOT_FOUND: no such table at %s", t.Table, t.Addr)
	case codes.Unavailable, codes.DeadlineExceeded:
		return fmt.Errorf("server %s unreachable: %v", t.Addr, status.Convert(err).Message())
	}
	return fmt.Errorf("table %s at %s: %w", t.Table, t.Addr, err)
}

// Admin is the official Cloud Bigtable admin client on a Tabula server.
type Admin struct {
	*bigtable.AdminClient
	conn *grpc.ClientConn
}

// DialAdmin connects the official admin client to c's server.
func DialAdmin(ctx context.Context, c Conn) (*Admin, error) {
	c = c.Resolved()
	// The connection's credentials, each part defaulting to the
	// environment, as the pipeline's Tabula clients (client.Dial) do.
	opts, err := c.Auth.ClientOptions()
	if err != nil {
		return nil, err
	}
	creds := tlsconfig.DialOption(opts.TLS)
	if opts.TLS == nil {
		if creds, err = tlsconfig.EnvDialOption(); err != nil {
			return nil, err
		}
	}
	dial := []grpc.DialOption{creds}
	if tok := auth.TokenFromEnv(opts.Token); tok != "" {
		dial = append(dial, grpc.WithPerRPCCredentials(auth.BearerToken(tok)))
	}
	cc, err := grpc.NewClient(c.Addr, dial...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", c.Addr, err)
	}
	a, err := bigtable.NewAdminClient(ctx, c.Project, c.Instance, option.WithGRPCConn(cc))
	if err != nil {
		cc.Close()
		return nil, err
	}
	return &Admin{AdminClient: a, conn: cc}, nil
}

// Close closes the client and its connection.
func (a *Admin) Close() error {
	a.AdminClient.Close()
	return a.conn.Close()
}

// EnsureFamilies makes table have families. With create it creates the
// table with them when it is missing, or adds the ones it lacks (no GC
// policy). Without create it changes nothing: a missing table, or one
// that lacks any of families, is an error that names the table and the
// families and says to use --create; uses says what needs the families,
// as in "table t lacks families a, b that the files use".
func EnsureFamilies(ctx context.Context, c Conn, table string, families []string, create bool, uses string) error {
	a, err := DialAdmin(ctx, c)
	if err != nil {
		return err
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	t := c.Table(table)
	info, err := a.TableInfo(ctx, table)
	if status.Code(err) == codes.NotFound {
		if !create {
			return fmt.Errorf("table %s: NOT_FOUND: no such table at %s (use --create to create it)", table, c.Addr)
		}
		conf := &bigtable.TableConf{TableID: table, ColumnFamilies: map[string]bigtable.Family{}}
		for _, f := range families {
			conf.ColumnFamilies[f] = bigtable.Family{GCPolicy: bigtable.NoGcPolicy()}
		}
		if err := a.CreateTableFromConf(ctx, conf); err != nil && status.Code(err) != codes.AlreadyExists {
			return fmt.Errorf("create table %s at %s: %w", table, c.Addr, err)
		}
		return nil
	}
	if err != nil {
		return ServerError(t, err)
	}
	missing := MissingFamilies(info.Families, families)
	if len(missing) == 0 {
		return nil
	}
	if !create {
		return MissingFamiliesError{Table: table, Missing: missing, Uses: uses}
	}
	for _, f := range missing {
		if err := a.CreateColumnFamilyWithConfig(ctx, table, f, bigtable.Family{GCPolicy: bigtable.NoGcPolicy()}); err != nil && status.Code(err) != codes.AlreadyExists {
			return fmt.Errorf("add family %s to %s: %w", f, table, err)
		}
	}
	return nil
}

// MissingFamilies returns the families of need missing from have,
// sorted and without repeats.
func MissingFamilies(have, need []string) []string {
	got := map[string]bool{}
	for _, f := range have {
		got[f] = true
	}
	var missing []string
	for _, f := range need {
		if !got[f] {
			got[f] = true
			missing = append(missing, f)
		}
	}
	sort.Strings(missing)
	return missing
}

// MissingFamiliesError is a table that lacks families a pipeline writes,
// which it may add only with --create.
type MissingFamiliesError struct {
	Table   string
	Missing []string
	// Uses says what needs the families ("that the files use"); may be
	// empty.
	Uses string
}

func (e MissingFamiliesError) Error() string {
	uses := ""
	if e.Uses != "" {
		uses = " " + e.Uses
	}
	return fmt.Sprintf("table %s lacks families %s%s (use --create to add them)", e.Table, strings.Join(e.Missing, ", "), uses)
}

// Families returns the families of table, sorted.
func Families(ctx context.Context, c Conn, table string) ([]string, error) {
	a, err := DialAdmin(ctx, c)
	if err != nil {
		return nil, err
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	info, err := a.TableInfo(ctx, table)
	if err != nil {
		return nil, ServerError(c.Table(table), err)
	}
	fams := append([]string(nil), info.Families...)
	sort.Strings(fams)
	return fams, nil
}

// Counter returns the committed value of a beamio counter of a run.
func Counter(pr beam.PipelineResult, name string) int64 {
	if pr == nil {
		return 0
	}
	var n int64
	for _, c := range pr.Metrics().AllMetrics().Counters() {
		if c.Namespace() == "beamio" && c.Name() == name {
			n += c.Result()
		}
	}
	return n
}

// Main runs a pipeline binary: it parses the flags (Beam's --runner,
// --endpoint and the rest are registered on flag.CommandLine by the SDK),
// calls beam.Init (on a remote runner's worker this process becomes the
// SDK harness and does not return), then run with a context cancelled by
// SIGINT/SIGTERM. An error is printed as "NAME: error" and exits 1; a
// usage error (from the flags or run returning a UsageError) exits 2.
func Main(name, summary string, register func(fs *flag.FlagSet), run func(ctx context.Context) error) {
	flag.CommandLine.Init(name, flag.ContinueOnError)
	register(flag.CommandLine)
	flag.CommandLine.Usage = func() { usage(os.Stderr, name, summary, register) }
	if err := flag.CommandLine.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	beam.Init()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		var ue UsageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// UsageError is a bad flag value found after parsing.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usagef returns a UsageError.
func Usagef(format string, args ...any) error { return UsageError{Err: fmt.Errorf(format, args...)} }

func usage(w io.Writer, name, summary string, register func(fs *flag.FlagSet)) {
	own := flag.NewFlagSet(name, flag.ContinueOnError)
	register(own)
	fmt.Fprintf(w, "%s — %s\n\nUsage: go run ./pipelines/%s [flags]\n\nFlags:\n", name, summary, name)
	own.SetOutput(w)
	own.PrintDefaults()
	fmt.Fprintf(w, "\nBeam's flags (the SDK's; all of them follow):\n")
	fmt.Fprintf(w, "  -runner string\n    \tprism (default, in this process); universal, flink or spark (a portable job service, with --endpoint); dataflow\n")
	fmt.Fprintf(w, "  -endpoint string\n    \tthe job service host:port of --runner universal (Flink's or Spark's job server)\n")
	fmt.Fprintf(w, "  -environment_type string\n    \tLOOPBACK, DOCKER or PROCESS: where the runner starts the Go SDK workers\n\n")
	seen := map[string]bool{}
	own.VisitAll(func(f *flag.Flag) { seen[f.Name] = true })
	flag.CommandLine.VisitAll(func(f *flag.Flag) {
		if seen[f.Name] {
			return
		}
		fmt.Fprintf(w, "  -%s\n    \t%s\n", f.Name, f.Usage)
	})
}
