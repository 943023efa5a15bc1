// Package client is Tabula's own Go client, with the paper's API: apply a
// row mutation (Apply, ApplyBulk with bounded memory), scanners over row
// ranges with family, column regex, time range and version limits,
// counters (ReadModifyWrite, Increment), CheckAndMutate, SampleRowKeys,
// the list of a table's tablets (what MapReduce and Beam split on), and
// what the official Cloud Bigtable clients cannot do: running scripts
// inside the tablet servers (RunScript, FilterRows).
//
// Data operations go to the server that holds the row's tablet, found
// through a LocationCache; a typed "not serving" answer drops the cached
// location and retries (the server applied nothing); UNAVAILABLE drops it
// too and is retried with backoff under the caller's deadline for reads,
// idempotent writes, and writes that certainly reached no server (gRPC had
// no connection to send them on) — never a write that may have been
// applied. A lookup that finds a tablet unassigned is retried with backoff
// (LocateRange).
//
// A Client knows one address. The first time it needs a tablet's location
// it asks the server there for the root tablet (clusterpb.Locator.GetRoot):
// a cluster's tablet server answers, and locations come from METADATA
// through the LocationCache (three levels: the root's location from
// GetRoot, the root tablet, a METADATA tablet), each server reached by its
// address through a connection pool; `tabula dev` answers UNIMPLEMENTED,
// and its one server lists the tablets it holds (Scripts.ListTablets).
// Options.Metadata skips the question.
//
// A script over a row range runs as the paper's client would run it: find
// the tablets of the range and their servers (the locator), group them by
// server into contiguous spans, send one Run per span, and merge the
// servers' partial aggregates.
package client

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/experimental"

	"github.com/tabuladb/tabula/security/tlsconfig"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletserver/scriptpb"
)

// MaxMessageSize is the largest message the client sends or accepts: a
// kept row may carry cells up to the server's 100 MiB value limit.
const MaxMessageSize = 256 << 20

// Options configure Dial and New. Zero values take the documented
// defaults.
type Options struct {
	// Project and Instance qualify table names
	// (projects/P/instances/I/tables/T); default "tabula" and "dev", as
	// the CLI's.
	Project, Instance string
	// Concurrency bounds the Runs of one aggregate script in flight at
	// once; default 8.
	Concurrency int
	// Metadata, when set, is where tablet locations come from (the
	// cluster's own processes pass one reading the root's location from
	// the lock service): the client reads METADATA through it without
	// asking the server for the root (Locator.GetRoot). Default: ask the
	// server behind the connection — a cluster's tablet servers answer
	// (NewMetadataSource over the connection), `tabula dev` does not.
	Metadata MetadataSource
	// TLS secures the connections the client dials (Dial's, and those to
	// the tablet servers its data operations reach directly): server
	// verification, and a client certificate for servers that require
	// one. Nil: plaintext for New; for Dial, the TABULA_TLS_CA,
	// TABULA_TLS_CERT and TABULA_TLS_KEY environment variables
	// (tlsconfig.ClientFromEnv), plaintext when none is set.
	TLS *tls.Config
	// Token is a bearer token sent with every call on the connections the
	// client dials (servers with authentication on: see README "Secure
	// deployment"). Empty: for Dial, $TABULA_TOKEN; none sent without it.
	// For New, cc carries its own credentials; Token then only reaches
	// the connections the client dials itself.
	Token string
	// ReuseScanBuffers makes this client's scans reuse their buffers: a
	// Row that Scanner.Next moved to (its key, cells, qualifiers and
	// values) is valid only until the next call to Next on that scanner.
	// For callers that copy what they keep (a file writer): a scan then
	// allocates per tablet, not per response, sparing the collector a
	// scan's size in garbage. Off by default: rows stay valid for good.
	ReuseScanBuffers bool
	// FailFastNotServing makes "not serving" answers retried a few times
	// at once, without waiting, and then returned: for a cluster's own
	// processes reading and writing METADATA, whose tablets only the
	// master's next round may serve again (waiting would hold up the
	// round that must get on to it). Off by default: they are retried
	// with backoff for about 9 s (a tablet loading, moving or splitting).
	FailFastNotServing bool
	// UnaryInterceptors run on every unary call of the connections the
	// client dials (Dial's, and those to the tablet servers), after its
	// own options: to observe each attempt of a write the client resends
	// (a fault campaign counts them), say.
	UnaryInterceptors []grpc.UnaryClientInterceptor
}

// TokenEnv is the environment variable Dial reads Options.Token from.
const TokenEnv = "TABULA_TOKEN"

// bearerToken sends "authorization: Bearer <token>" with every call.
type bearerToken string

func (t bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

// RequireTransportSecurity is false so that tabula dev on loopback works
// in plaintext; over a network, use TLS.
func (t bearerToken) RequireTransportSecurity() bool { return false }

// UserAgent opens the user-agent header of every call the client makes
// (gRPC appends its own). A server may answer such a caller as one that
// locates tablets itself: "not serving" as FAILED_PRECONDITION with its
// detail (the write was not applied; look the tablet up again), which
// for the official clients tabula dev turns into a retryable UNAVAILABLE.
const UserAgent = "tabula-client"

// callOptions are the dial options of the connections the client dials:
// TLS, the token, message sizes.
// ReconnectParams are the reconnect back-off of the connections Tabula's
// own processes and clients dial to tablet servers and masters: from
// 100 ms up to 1 s rather than gRPC's default of 1 s up to 120 s. A
// connection whose server died is in back-off, and until the back-off
// ends every call on it fails at once with the last dial's error — also
// once a process serves again at the address. A tablet server killed and
// restarted by its supervisor is back within about a second; with the
// default back-off, grown over the seconds it was down, a master's
// METADATA read of the root it had just recovered there failed with
// "connection refused" 1.3 s after the root served, and the round that
// would have started its log's sort went by (session 31). Within the
// cluster a dial to an address that refuses costs microseconds.
var ReconnectParams = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
	MinConnectTimeout: 20 * time.Second, // gRPC's default
}

func (o *Options) dialOptions() []grpc.DialOption {
	opts := []grpc.DialOption{
		grpc.WithUserAgent(UserAgent),
		grpc.WithConnectParams(ReconnectParams),
		tlsconfig.DialOption(o.TLS),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageSize), grpc.MaxCallSendMsgSize(MaxMessageSize)),
		experimental.WithBufferPool(framePool),
	}
	if o.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearerToken(o.Token)))
	}
	if len(o.UnaryInterceptors) > 0 {
		opts = append(opts, grpc.WithChainUnaryInterceptor(o.UnaryInterceptors...))
	}
	return opts
}

func (o *Options) setDefaults() {
	if o.Project == "" {
		o.Project = "tabula"
	}
	if o.Instance == "" {
		o.Instance = "dev"
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 8
	}
}

// Client runs scripts against a Tabula server. It is safe for concurrent
// use.
type Client struct {
	opts  Options
	cc    *grpc.ClientConn
	owned bool         // cc was dialed by Dial: Close closes it
	loc   locator      // the scripts' locator: auto (tests may wrap it)
	auto  *autoLocator // picks serverLocator or metaLocator on first use
	plane *dataPlane   // routing of the data operations (data.go)
}

// Dial connects to the server at addr (host:port), over TLS when
// Options.TLS (or the environment) says so, sending Options.Token (or
// $TABULA_TOKEN) with every call. Close releases the connection.
// It fails when the TLS files the environment names do not load.
func Dial(addr string, opts Options) (*Client, error) {
	if err := opts.resolveTLS(); err != nil {
		return nil, err
	}
	if opts.Token == "" {
		opts.Token = os.Getenv(TokenEnv)
	}
	cc, err := grpc.NewClient(addr, opts.dialOptions()...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", addr, err)
	}
	c := New(cc, opts)
	c.owned = true
	return c, nil
}

// New returns a client over an existing connection (shared with the
// official clients, say), which Close leaves open. The connection should
// accept messages of MaxMessageSize.
//
// The connections New's client dials itself (to other tablet servers) use
// Options.TLS as given: nil is plaintext (New does not read the
// environment; pass the config cc was dialed with).
func New(cc *grpc.ClientConn, opts Options) *Client {
	opts.setDefaults()
	c := &Client{opts: opts, cc: cc}
	c.plane = newDataPlane(c)
	c.auto = &autoLocator{c: c}
	c.loc = c.auto
	return c
}

// Close closes the connection if Dial opened it.
func (c *Client) Close() error {
	c.closeData() // the data operations' connection pool (data.go)
	if c.owned {
		return c.cc.Close()
	}
	return nil
}

// TableName returns the full name of table: table itself when it is
// already projects/P/instances/I/tables/T.
func (c *Client) TableName(table string) string {
	if _, err := meta.ParseTableName(table); err == nil {
		return table
	}
	return meta.TableID{Instance: c.opts.Instance, Table: table}.FullName(c.opts.Project)
}

// scriptsClient returns the stub of the script service on a server; the
// locator gives each tablet's server as a connection.
func scriptsClient(cc grpc.ClientConnInterface) scriptpb.ScriptsClient {
	return scriptpb.NewScriptsClient(cc)
}

// resolveTLS fills TLS from the environment when it is nil.
func (o *Options) resolveTLS() error {
	if o.TLS != nil {
		return nil
	}
	c, err := tlsconfig.ClientFromEnv()
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	o.TLS = c
	return nil
}
