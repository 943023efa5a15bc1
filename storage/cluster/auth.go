package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/tabuladb/tabula/security/auth"
	"github.com/tabuladb/tabula/security/guard"
	"github.com/tabuladb/tabula/storage/master"
	"github.com/tabuladb/tabula/storage/meta"
)

// AuthConfig turns authentication and grants on for a role's gRPC server
// (security/guard). Nil leaves them off: everyone may do everything.
type AuthConfig struct {
	// Authenticator checks credentials. Required.
	Authenticator *auth.Authenticator
	// Superusers are members ("user:NAME", "group:NAME") allowed
	// everything; the servers of a cluster (their certificates' principal:
	// mutual TLS) must be among them, since they call each other. Users
	// among them are also forwarders (auth.Config.Forwarders): a gateway
	// states the identity of the caller it forwards for.
	Superusers []string
	// CacheTTL is how long a server keeps a table's grants; default
	// guard.DefaultCacheTTL. A grant or revocation takes effect within it.
	CacheTTL time.Duration
	// ServerToken, when set, is the bearer token the role sends on its
	// own calls to the cluster's other servers (control, gateway
	// forwarding, the relay to the master, METADATA lookups): how servers
	// prove who they are in a cluster without mutual TLS. Its principal
	// must be a user among Superusers (and so a forwarder). Empty: the
	// servers' client certificates say who they are.
	ServerToken string
}

// serverDialOptions are the dial options of a role's calls to the other
// servers: the server token's credentials, when configured.
func (c *AuthConfig) serverDialOptions() []grpc.DialOption {
	if c == nil || c.ServerToken == "" {
		return nil
	}
	return []grpc.DialOption{grpc.WithPerRPCCredentials(auth.BearerToken(c.ServerToken))}
}

// serverToken is ServerToken, "" for a nil config.
func (c *AuthConfig) serverToken() string {
	if c == nil {
		return ""
	}
	return c.ServerToken
}

// catalogTables is the guard's view of a catalog: a table's grants and
// families. instance, when set, maps every instance to it (tabula dev
// --instance-agnostic).
func catalogTables(cat meta.Catalog, instance string) guard.LookupFunc {
	return tableLookup(cat.Get, instance)
}

// deletedTables is the guard's view of the deleted tables still
// restorable (guard.Config.Deleted): each one's grants as recorded at its
// deletion, read from the master's records. instance as catalogTables.
func deletedTables(admin *master.AdminService, instance string) guard.LookupFunc {
	return tableLookup(admin.DeletedTable, instance)
}

// tableLookup is the guard's lookup of a table's grants and families
// through get, which answers meta.ErrTableNotFound for an unknown table.
func tableLookup(get func(context.Context, meta.TableID) (meta.Table, error), instance string) guard.LookupFunc {
	return func(ctx context.Context, name string) (guard.TableInfo, error) {
		id, err := meta.ParseTableName(name)
		if err != nil {
			return guard.TableInfo{}, fmt.Errorf("%w: %v", guard.ErrTableNotFound, err)
		}
		if instance != "" {
			id.Instance = instance
		}
		t, err := get(ctx, id)
		if errors.Is(err, meta.ErrTableNotFound) {
			return guard.TableInfo{}, fmt.Errorf("%w: %s", guard.ErrTableNotFound, id)
		}
		if err != nil {
			return guard.TableInfo{}, err
		}
		return guard.TableInfo{Policy: t.ACL, Families: slices.Sorted(maps.Keys(t.Families))}, nil
	}
}

// metadataRows tells the guard whose rows a METADATA key is
// (guard.LocationRows): a user table's (its name in any project: the
// catalog ignores projects), or METADATA's own ("").
func metadataRows(key []byte) (table string, start, end []byte, ok bool) {
	t, start, end, ok := meta.MetadataKeyTable(key)
	if !ok {
		return "", nil, nil, false
	}
	if t == meta.MetadataTable {
		return "", start, end, true
	}
	return t.FullName("-"), start, end, true
}

// relayedToMaster are the services a tablet server relays to the active
// master (forwardUnknown): the master's guard authorizes them.
var relayedToMaster = []string{
	"/google.bigtable.admin.v2.BigtableTableAdmin/",
	"/tabula.admin.v1.LocalityGroups/",
	"/google.longrunning.Operations/",
}

// guardOptions are the server options installing g (none for nil).
func guardOptions(g *guard.Guard) []grpc.ServerOption {
	if g == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(g.UnaryInterceptor()), grpc.ChainStreamInterceptor(g.StreamInterceptor())}
}

// newGuard returns the guard of a role's server over cat, or nil when cfg
// is nil (authentication off).
//
// terminal is guard.Config.Terminal: true for the master, whose calls to
// tablet servers while it serves an admin call are the control plane's.
// admin, the admin API the guard protects (nil where it is relayed), gives
// the grants of deleted tables (guard.Config.Deleted).
func newGuard(cfg *AuthConfig, cat meta.Catalog, instance string, relayed []string, terminal bool, admin *master.AdminService, log *slog.Logger, reg prometheus.Registerer) (*guard.Guard, error) {
	if cfg == nil {
		return nil, nil
	}
	var deleted guard.Tables
	if admin != nil {
		// Uncached: read only by UndeleteTable of a table not in the
		// catalog.
		deleted = deletedTables(admin, instance)
	}
	return guard.New(guard.Config{
		Authenticator: cfg.Authenticator,
		Superusers:    cfg.Superusers,
		Tables:        guard.NewCache(catalogTables(cat, instance), cfg.CacheTTL),
		Deleted:       deleted,
		Relayed:       relayed,
		Terminal:      terminal,
		// Clients (MapReduce's splits, Beam's reads, storage/client's
		// location cache) find tablets in METADATA as their caller.
		LocationTables: map[string]guard.LocationRows{meta.MetadataTableName: metadataRows},
		Logger:         log,
		Registerer:     reg,
	})
}

// WorkerServerOptions returns the server options of a MapReduce worker
// process (`tabula worker`, a tablet server's --worker) with
// authentication on: every call authenticated, the worker's own RPCs open
// to any authenticated caller (a task's reads and writes carry its
// submitter's token to the tablet servers, which check the grants), any
// other RPC for superusers. None for a nil config.
func (c *AuthConfig) WorkerServerOptions(log *slog.Logger, reg prometheus.Registerer) ([]grpc.ServerOption, error) {
	if c == nil {
		return nil, nil
	}
	g, err := guard.New(guard.Config{Authenticator: c.Authenticator, Superusers: c.Superusers, Tables: guard.NoTables{}, Logger: log, Registerer: reg})
	if err != nil {
		return nil, err
	}
	return guardOptions(g), nil
}
