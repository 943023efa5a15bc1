// Package guard enforces authentication (security/auth) and grants
// (security/acl) on a Tabula gRPC server: a unary and a stream interceptor
// that, for every call,
//
//  1. let the health service through (load balancers probe it);
//  2. authenticate the caller (UNAUTHENTICATED without valid credentials);
//  3. decide by the method's rule (rules.go) what the call needs — read,
//     write or admin on a table, on the families it touches, a superuser,
//     or only an authenticated caller — and refuse it with
//     PERMISSION_DENIED naming the table or family, before the service sees
//     it, so that a refused write changes nothing;
//  4. narrow reads to the families the caller may read by rewriting the
//     request at the API layer: the RowFilter of ReadRows, of a script run
//     and of CheckAndMutateRow's predicate becomes a chain of a family
//     filter of the readable families and the caller's filter, so every
//     limit in the caller's filter (cells_per_row_limit, ...) counts only
//     cells the caller may see;
//  5. log one structured audit line for every refusal and for every
//     successful grant or schema change, and count both.
//
// Superusers skip the grant checks. The identity is passed to the service
// (auth.NewContext) and, for a gateway that forwards the call to another
// server, stated in the outgoing metadata (auth.ForwardedPrincipalKey):
// the other server honours it because the gateway is a forwarder there. A
// Terminal server (a master) states nothing: its calls are its own.
//
// The package knows the wire API (bigtablepb, adminpb, the script service)
// but not the engine: a table's grants and families come from Tables.
package guard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/security/acl"
	"github.com/tabuladb/tabula/security/auth"
)

// TableInfo is what the guard needs of a table: its grants and its
// families.
type TableInfo struct {
	Policy   acl.Policy
	Families []string
}

// ErrTableNotFound is returned (wrapped) by Tables.Lookup for a table that
// does not exist.
var ErrTableNotFound = errors.New("table not found")

// Tables looks up a table by its full name
// (projects/P/instances/I/tables/T). Implementations map instances as their
// server does (tabula dev --instance-agnostic) and may cache (NewCache).
type Tables interface {
	Lookup(ctx context.Context, table string) (TableInfo, error)
}

// Config configures a Guard.
type Config struct {
	// Authenticator checks credentials. Required.
	Authenticator *auth.Authenticator
	// Superusers are members ("user:NAME", "group:NAME") allowed
	// everything.
	Superusers []string
	// Tables gives the tables' grants and families. Required.
	Tables Tables
	// Deleted, when set, gives the grants of deleted tables that are
	// still restorable (as recorded when each was deleted): UndeleteTable
	// of a table not in Tables is decided by the deleted table's own
	// grants, so its admins (not only superusers) may bring it back.
	Deleted Tables
	// Relayed names method prefixes this server does not serve but relays
	// to another server that runs its own guard (a cluster tablet server
	// relays the admin API to the master): they are authenticated here and
	// authorized there.
	Relayed []string
	// Terminal marks a server that forwards no call for its caller (a
	// cluster's master): the calls it makes while serving one — to tablet
	// servers, to METADATA — are its own, the control plane's work on
	// what this guard has already authorized, so the caller's identity is
	// not stated to the servers it calls (they would check the caller's
	// grants on the control plane's RPCs and tables and refuse them).
	Terminal bool
	// LocationTables are the tables clients read to find tablets (a
	// cluster's METADATA), by full name, with how to tell whose rows a key
	// is. An authenticated caller may ReadRows the rows that describe the
	// tablets of a table it holds a grant on (any permission, any
	// family), and those describing the location table's own tablets:
	// the guard narrows each requested range to the rows of the table
	// its start key names, and refuses keys of other tables and requests
	// that name no rows. Every other RPC on them is for superusers.
	LocationTables map[string]LocationRows
	// Logger receives the audit lines; default slog.Default().
	Logger *slog.Logger
	// Registerer, when set, gets the guard's counters.
	Registerer prometheus.Registerer
}

// LocationRows tells whose rows a key of a location table is: the table
// (full name; "" for the location table's own tablets) and the range
// [start, end) of that table's rows. ok is false for a key that names no
// table.
type LocationRows func(key []byte) (table string, start, end []byte, ok bool)

// Guard holds the interceptors' state. Safe for concurrent use.
type Guard struct {
	cfg     Config
	log     *slog.Logger
	refused *prometheus.CounterVec
	changes *prometheus.CounterVec
	allowed prometheus.Counter
}

// New returns a Guard; it registers its counters with cfg.Registerer.
func New(cfg Config) (*Guard, error) {
	if cfg.Authenticator == nil || cfg.Tables == nil {
		return nil, errors.New("guard: Config.Authenticator and Config.Tables are required")
	}
	for _, m := range cfg.Superusers {
		if err := acl.ValidateMember(m); err != nil {
			return nil, fmt.Errorf("guard: superuser: %w", err)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	g := &Guard{
		cfg: cfg,
		log: cfg.Logger,
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tabula_auth_refused_total",
			Help: "Requests refused by authentication (code Unauthenticated) or by grants (PermissionDenied), by method.",
		}, []string{"method", "code"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tabula_audit_changes_total",
			Help: "Grant and schema changes that succeeded, by method.",
		}, []string{"method"}),
		allowed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tabula_auth_allowed_total",
			Help: "Requests that passed authentication and the grant checks.",
		}),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{g.refused, g.changes, g.allowed} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("guard: metrics: %w", err)
			}
		}
	}
	return g, nil
}

// call is one call being checked.
type call struct {
	method string
	id     auth.Identity
	su     bool
	table  string // for the audit line
	peer   string
}

func (c *call) subject() acl.Subject {
	return acl.Subject{Principal: c.id.Principal, Groups: c.id.Groups}
}

// begin authenticates a call and returns the context the service gets.
func (g *Guard) begin(ctx context.Context, method string) (context.Context, *call, error) {
	c := &call{method: method}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		c.peer = p.Addr.String()
	}
	id, err := g.cfg.Authenticator.Authenticate(ctx)
	if err != nil {
		g.refuse(c, err)
		return ctx, c, err
	}
	c.id = id
	c.su = acl.IsSuperuser(c.subject(), g.cfg.Superusers)
	ctx = auth.NewContext(ctx, id)
	if g.cfg.Terminal {
		return ctx, c, nil
	}
	// State the identity to the servers this call may be forwarded to
	// (the gateway's owners: outgoing metadata; the relay of unknown
	// services copies the incoming metadata).
	groups := strings.Join(id.Groups, ",")
	ctx = metadata.AppendToOutgoingContext(ctx, auth.ForwardedPrincipalKey, id.Principal, auth.ForwardedGroupsKey, groups)
	md, _ := metadata.FromIncomingContext(ctx)
	md = md.Copy()
	md.Set(auth.ForwardedPrincipalKey, id.Principal)
	md.Set(auth.ForwardedGroupsKey, groups)
	ctx = metadata.NewIncomingContext(ctx, md)
	return ctx, c, nil
}

// refuse logs and counts a refusal; err is the status returned.
func (g *Guard) refuse(c *call, err error) {
	st := status.Convert(err)
	g.refused.WithLabelValues(c.method, st.Code().String()).Inc()
	attrs := []any{"audit", "refused", "method", c.method, "code", st.Code().String(), "reason", st.Message(), "peer", c.peer}
	if c.id.Principal != "" {
		attrs = append(attrs, "principal", c.id.Principal, "groups", c.id.Groups, "auth", c.id.Method)
	}
	if c.table != "" {
		attrs = append(attrs, "table", c.table)
	}
	var d *acl.DeniedError
	if errors.As(err, &d) {
		attrs = append(attrs, "family", d.Family, "want", d.Want.String())
	}
	g.log.Warn("request refused", attrs...)
}

// changed logs a successful grant or schema change.
func (g *Guard) changed(c *call) {
	g.changes.WithLabelValues(c.method).Inc()
	g.log.Info("schema or grant changed", "audit", "change", "method", c.method, "principal", c.id.Principal, "auth", c.id.Method, "table", c.table, "peer", c.peer)
}

// deniedError is the PERMISSION_DENIED status of a missing grant; it keeps
// the acl.DeniedError for the audit line.
type deniedError struct {
	table string
	err   error
}

func (e *deniedError) Error() string { return e.err.Error() }
func (e *deniedError) Unwrap() error { return e.err }
func (e *deniedError) GRPCStatus() *status.Status {
	return status.New(codes.PermissionDenied, fmt.Sprintf("table %s: %v", e.table, e.err))
}

func denied(table string, err error) error { return &deniedError{table: table, err: err} }

// UnaryInterceptor returns the unary interceptor. Put it after any
// interceptor that rewrites table names (--instance-agnostic), so it sees
// the names the services see.
func (g *Guard) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if isPublic(info.FullMethod) {
			return handler(ctx, req)
		}
		ctx, c, err := g.begin(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		r := g.rule(info.FullMethod)
		if r.answer != nil {
			resp, err := r.answer(ctx, g, c, req)
			if err != nil {
				g.refuse(c, err)
			}
			return resp, err
		}
		if err := g.check(ctx, c, r, req); err != nil {
			g.refuse(c, err)
			return nil, err
		}
		g.allowed.Inc()
		resp, err := handler(ctx, req)
		if err == nil {
			if r.filterResponse != nil {
				resp = r.filterResponse(ctx, g, c, resp)
			}
			if r.change {
				g.changed(c)
			}
		}
		return resp, err
	}
}

// StreamInterceptor returns the stream interceptor: every message the
// caller sends is checked (and rewritten) before the service receives it.
func (g *Guard) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if isPublic(info.FullMethod) {
			return handler(srv, ss)
		}
		ctx, c, err := g.begin(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		r := g.rule(info.FullMethod)
		if r.kind == ruleSuperuser && !c.su {
			// Refused before the service runs: a stream's service may
			// answer (or fail) before it reads a message.
			err := g.check(ctx, c, r, nil)
			g.refuse(c, err)
			return err
		}
		g.allowed.Inc()
		err = handler(srv, &guardedStream{ServerStream: ss, ctx: ctx, g: g, c: c, r: r})
		if err == nil && r.change {
			g.changed(c)
		}
		return err
	}
}

type guardedStream struct {
	grpc.ServerStream
	ctx context.Context
	g   *Guard
	c   *call
	r   rule
}

func (s *guardedStream) Context() context.Context { return s.ctx }

func (s *guardedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if err := s.g.check(s.ctx, s.c, s.r, m); err != nil {
		s.g.refuse(s.c, err)
		return err
	}
	return nil
}

// isPublic reports the methods that need no credentials: health checks.
func isPublic(method string) bool {
	return strings.HasPrefix(method, "/grpc.health.v1.Health/")
}

// check applies r to one request message.
func (g *Guard) check(ctx context.Context, c *call, r rule, req any) error {
	if r.kind == ruleAuthenticated {
		return nil
	}
	if c.su {
		return nil
	}
	if r.kind == ruleSuperuser {
		return status.Errorf(codes.PermissionDenied, "%s is for superusers; %s is not one", c.method, c.id.Principal)
	}
	table, err := r.table(req)
	if err != nil {
		return err
	}
	c.table = table
	if rows, ok := g.cfg.LocationTables[table]; ok {
		return g.checkLocationRead(ctx, c, table, rows, req)
	}
	info, err := g.cfg.Tables.Lookup(ctx, table)
	if errors.Is(err, ErrTableNotFound) && r.deleted && g.cfg.Deleted != nil {
		info, err = g.cfg.Deleted.Lookup(ctx, table)
	}
	if errors.Is(err, ErrTableNotFound) {
		// Nobody but a superuser has a grant on a table that does not
		// exist; saying NOT_FOUND would tell strangers which tables do.
		return status.Errorf(codes.PermissionDenied, "table %s: %s has no grant on it", table, c.id.Principal)
	}
	if err != nil {
		return status.Errorf(codes.Unavailable, "guard: reading the grants of %s: %v", table, err)
	}
	return r.check(c.subject(), table, info, req)
}

// checkLocationRead decides a call on a location table by a caller that
// is not a superuser: a ReadRows of the rows describing the tablets of
// tables it holds a grant on, or the location table's own, each range
// narrowed in place to its table's rows (LocationTables).
func (g *Guard) checkLocationRead(ctx context.Context, c *call, table string, rows LocationRows, req any) error {
	r, ok := req.(*bigtablepb.ReadRowsRequest)
	if !ok || c.method != dataPrefix+"ReadRows" {
		return status.Errorf(codes.PermissionDenied, "%s on %s is for superusers; %s is not one", c.method, table, c.id.Principal)
	}
	set := r.GetRows()
	if len(set.GetRowKeys()) == 0 && len(set.GetRowRanges()) == 0 {
		return status.Errorf(codes.PermissionDenied, "reading all of %s is for superusers: name the rows of tables you hold a grant on", table)
	}
	// allowed reports whether the caller may locate the tablets of owner.
	allowed := func(owner string) error {
		if owner == "" {
			return nil
		}
		info, err := g.cfg.Tables.Lookup(ctx, owner)
		if err != nil && !errors.Is(err, ErrTableNotFound) {
			return status.Errorf(codes.Unavailable, "guard: reading the grants of %s: %v", owner, err)
		}
		s := c.subject()
		if err == nil && (info.Policy.AllowsSome(s, acl.Read) || info.Policy.AllowsSome(s, acl.Write)) {
			return nil
		}
		return status.Errorf(codes.PermissionDenied, "table %s: the locations of %s's tablets are for principals with a grant on it; %s has none", table, owner, c.id.Principal)
	}
	for _, k := range set.GetRowKeys() {
		owner, _, _, ok := rows(k)
		if !ok {
			return status.Errorf(codes.PermissionDenied, "table %s: row %q names no table", table, k)
		}
		if err := allowed(owner); err != nil {
			return err
		}
	}
	for _, rr := range set.GetRowRanges() {
		from := rr.GetStartKeyClosed()
		if from == nil {
			from = rr.GetStartKeyOpen()
		}
		owner, _, end, ok := rows(from)
		if !ok {
			return status.Errorf(codes.PermissionDenied, "table %s: a range must start at a row of a table (got %q)", table, from)
		}
		if err := allowed(owner); err != nil {
			return err
		}
		// Narrow the range to the owner's rows.
		to := rr.GetEndKeyOpen()
		if to == nil {
			to = rr.GetEndKeyClosed()
		}
		if len(to) == 0 || bytes.Compare(to, end) >= 0 {
			rr.EndKey = &bigtablepb.RowRange_EndKeyOpen{EndKeyOpen: end}
		}
	}
	return nil
}
