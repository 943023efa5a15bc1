package master

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/master/adminextpb"
	"github.com/tabuladb/tabula/storage/master/assign"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// Defaults of the limits in Options.
const (
	DefaultMaxInitialSplits = 1000
	DefaultMaxFamilies      = 1000
	// DefaultServeTimeout bounds how long CreateTable waits for a new
	// table's tablets to be served (Options.ServeTimeout).
	DefaultServeTimeout = time.Minute
	// MaxFamilyNameBytes is Cloud Bigtable's limit on family names (and
	// Tabula's on locality group names).
	MaxFamilyNameBytes = 64
)

// ClusterID is the one cluster a Tabula instance reports in the
// cluster_states of REPLICATION_VIEW and FULL table views.
const ClusterID = "tabula"

// Options configure an AdminService. Catalog and Host are required; zero
// values of the others take the documented defaults.
type Options struct {
	// Catalog is the durable record of the tables.
	Catalog meta.Catalog
	// Host opens, updates and drops the tables' tablets.
	Host TableHost
	// Store holds the tables' SSTables (under meta.Table.Dir): DeleteTable
	// deletes a deleted table's files from it and Start deletes the files
	// of tables that are no longer in the catalog. Nil: files are left.
	Store blob.Store
	// Instance, when set, makes the service instance-agnostic: every
	// request's instance is mapped to this one, so clients configured with
	// any project and instance see the same tables. Names in responses
	// keep the project and instance of the request.
	Instance string
	// MaxInitialSplits bounds CreateTableRequest.initial_splits; default
	// DefaultMaxInitialSplits.
	MaxInitialSplits int
	// MaxFamilies bounds the column families of a table; default
	// DefaultMaxFamilies.
	MaxFamilies int
	// Limits bound split keys and row key prefixes (MaxRowKeyBytes);
	// zero means cell.DefaultLimits().
	Limits cell.Limits
	// NewTabletID returns a fresh, unique tablet ID for a new table's
	// tablet; default <table>-<µs time, hex>-<random hex>-<index>.
	NewTabletID func(id meta.TableID, index int) string
	// BackupStore is the object store of backups when Store is nil (the
	// cluster, where the master's sweep, not DeleteTable, collects a
	// dropped table's files); default Store.
	BackupStore blob.Store
	// States are the tablets' saved states: RestoreTable writes the new
	// tablets' states there. Nil: backups are UNIMPLEMENTED.
	States tablet.StateStore
	// MinBackupExpiry is the least time from now a backup's expire_time
	// may be; default DefaultMinBackupExpiry (Cloud Bigtable's 6 hours),
	// negative: none.
	MinBackupExpiry time.Duration
	// UndeleteRetention is how long DeleteTable keeps a deleted table
	// restorable by UndeleteTable (undelete.go); zero deletes at once.
	// It needs the object store (Store or BackupStore), States and a
	// Host that is a BackupHost; without them tables are deleted at once.
	UndeleteRetention time.Duration
	// LiveFiles, when set, returns the files every live tablet
	// references (with the tablets whose states the host serves, which
	// the catalog's tablet list may not name after splits and merges).
	// DeleteTable and Start keep them when they collect a deleted
	// table's directory: a restored table's tablets reference files in
	// its backup's source directory. Nil: the states of the catalog's
	// tablets and their split descendants.
	LiveFiles func(ctx context.Context) ([]assign.TabletFiles, error)
	// ServeTimeout bounds how long CreateTable waits, with a Host that is
	// a ServingWaiter, for every tablet of the new table to be served;
	// default DefaultServeTimeout. (The caller's deadline bounds it too.)
	ServeTimeout time.Duration
	// Now is the clock of catalog timestamps; default time.Now.
	Now func() time.Time
	// Logger receives events (tables created and deleted, files
	// collected); default slog.Default().
	Logger *slog.Logger
}

// AdminService implements google.bigtable.admin.v2.BigtableTableAdmin over a
// catalog and the tablet servers: tables and families here, authorized
// views in authorizedviews.go, backups and restore in backups.go, undelete
// in undelete.go, IAM in iam.go, long-running operations in operations.go.
// RPCs Tabula does not support (snapshots, schema bundles, ...) answer
// UNIMPLEMENTED naming the RPC. All methods are safe for concurrent use.
type AdminService struct {
	adminpb.UnimplementedBigtableTableAdminServer
	opts  Options
	locks tableLocks
	opSeq atomic.Uint64
	ops   operations
}

// NewAdminService returns the service. Call Start before serving.
func NewAdminService(opts Options) (*AdminService, error) {
	if opts.Catalog == nil || opts.Host == nil {
		return nil, errors.New("master: Options.Catalog and Options.Host are required")
	}
	if opts.MaxInitialSplits <= 0 {
		opts.MaxInitialSplits = DefaultMaxInitialSplits
	}
	if opts.MaxFamilies <= 0 {
		opts.MaxFamilies = DefaultMaxFamilies
	}
	if opts.Limits == (cell.Limits{}) {
		opts.Limits = cell.DefaultLimits()
	}
	if opts.NewTabletID == nil {
		opts.NewTabletID = newTabletID
	}
	if opts.ServeTimeout <= 0 {
		opts.ServeTimeout = DefaultServeTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &AdminService{opts: opts}, nil
}

// newTabletID names a table's initial tablet. The table name makes logs and
// state objects readable; time and randomness make the ID unique across
// re-creations of a table of the same name.
func newTabletID(id meta.TableID, index int) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%x-%s-%d", id.Table, time.Now().UnixMicro(), hex.EncodeToString(b[:]), index)
}

// Register registers on srv the admin service, the LocalityGroups
// extension and google.longrunning.Operations (GetOperation of the
// operations UpdateTable returned).
func (s *AdminService) Register(srv grpc.ServiceRegistrar) {
	adminpb.RegisterBigtableTableAdminServer(srv, s)
	adminextpb.RegisterLocalityGroupsServer(srv, &LocalityGroupService{admin: s})
	longrunningpb.RegisterOperationsServer(srv, &s.ops)
}

// Start opens the tablets of every table in the catalog — what a restart
// needs — and then deletes the files of tables no longer in the catalog
// (left behind by a DeleteTable that crashed half-way). Call it once,
// before serving. It opens every table it can and returns the errors of
// those it could not open, joined.
func (s *AdminService) Start(ctx context.Context) error {
	tables, err := s.opts.Catalog.List(ctx, "")
	if err != nil {
		return fmt.Errorf("master: listing the catalog: %w", err)
	}
	var errs []error
	for _, t := range tables {
		if err := s.opts.Host.OpenTable(ctx, t); err != nil {
			errs = append(errs, fmt.Errorf("master: opening table %s: %w", t.ID, err))
		}
	}
	if err := s.collectOrphans(ctx, tables); err != nil {
		// Orphans only waste space; a failure to delete them must not
		// keep the server from serving.
		s.opts.Logger.Warn("collecting files of deleted tables", "err", err)
	}
	s.opts.Logger.Info("tables opened", "tables", len(tables), "failed", len(errs))
	return errors.Join(errs...)
}

// collectOrphans deletes the SSTables under meta.TableDirPrefix of tables
// that are not in tables.
func (s *AdminService) collectOrphans(ctx context.Context, tables []meta.Table) error {
	if s.opts.Store == nil {
		return nil
	}
	known := make(map[string]bool, len(tables))
	for _, t := range tables {
		known[t.Dir()+"/"] = true
	}
	objs, err := s.opts.Store.List(ctx, meta.TableDirPrefix)
	if err != nil {
		return err
	}
	orphans := make(map[string]bool)
	for _, o := range objs {
		// tables/<instance>/<table>/<file>
		parts := strings.SplitN(strings.TrimPrefix(o.Name, meta.TableDirPrefix), "/", 3)
		if len(parts) < 3 {
			continue
		}
		dir := meta.TableDirPrefix + parts[0] + "/" + parts[1] + "/"
		if !known[dir] {
			orphans[dir] = true
		}
	}
	var errs []error
	for _, dir := range slices.Sorted(maps.Keys(orphans)) {
		errs = append(errs, s.collectDir(ctx, dir))
	}
	return errors.Join(errs...)
}

// collectDir deletes every SSTable under dir (which ends in "/"): the files
// of a table that no longer exists.
func (s *AdminService) collectDir(ctx context.Context, dir string) error {
	if s.opts.Store == nil {
		return nil
	}
	// No tablet of the dropped table may commit a file any more: no
	// grace. Other tables' tablets may reference its files (restored
	// from a backup of it), and backups and dropped-table records keep
	// theirs (SweepFiles).
	live, err := s.liveFiles(ctx)
	if err != nil {
		return fmt.Errorf("reading the files live tablets reference: %w", err)
	}
	deleted, err := SweepFiles(ctx, s.opts.Store, dir, live, 0, time.Now())
	s.opts.Logger.Info("collected files of a deleted table", "dir", dir, "files", len(deleted), "err", err)
	return err
}

// liveFiles returns the files every live tablet references (see
// Options.LiveFiles).
func (s *AdminService) liveFiles(ctx context.Context) ([]assign.TabletFiles, error) {
	if s.opts.LiveFiles != nil {
		return s.opts.LiveFiles(ctx)
	}
	if s.opts.States == nil {
		return nil, nil
	}
	tables, err := s.opts.Catalog.List(ctx, "")
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, t := range tables {
		for _, ref := range t.Tablets {
			ids = append(ids, ref.ID)
		}
	}
	return ReferencedFiles(ctx, s.opts.States, ids)
}

// --- names ---

// instance maps a request's instance to the catalog's.
func (s *AdminService) instance(requested string) string {
	if s.opts.Instance != "" {
		return s.opts.Instance
	}
	return requested
}

// tableName is a parsed table name: the catalog ID and the request's
// project and instance, which the response names keep.
type tableName struct {
	id       meta.TableID
	project  string
	instance string
}

func (n tableName) String() string {
	return "projects/" + n.project + "/instances/" + n.instance + "/tables/" + n.id.Table
}

func (s *AdminService) parseParent(field, name string) (project, instance string, err error) {
	project, instance, err = meta.ParseInstanceName(name)
	if err != nil {
		return "", "", invalidArg(field, "%v", err)
	}
	return project, instance, nil
}

func (s *AdminService) parseTable(field, name string) (tableName, error) {
	p := strings.Split(name, "/")
	if len(p) != 6 {
		return tableName{}, invalidArg(field, "%q is not projects/<project>/instances/<instance>/tables/<table>", name)
	}
	id, err := meta.ParseTableName(name)
	if err != nil {
		return tableName{}, invalidArg(field, "%v", err)
	}
	n := tableName{id: id, project: p[1], instance: p[3]}
	n.id.Instance = s.instance(n.id.Instance)
	return n, nil
}

// get reads a table's entry with NOT_FOUND naming the table.
func (s *AdminService) get(ctx context.Context, n tableName) (meta.Table, error) {
	t, err := s.opts.Catalog.Get(ctx, n.id)
	if errors.Is(err, meta.ErrTableNotFound) {
		return meta.Table{}, status.Errorf(codes.NotFound, "table %q not found", n.String())
	}
	if err == nil && t.Restoring {
		// Half created (meta.Table.Restoring): it exists once its
		// RestoreTable (or UndeleteTable) is done.
		return meta.Table{}, status.Errorf(codes.NotFound, "table %q not found (it is being restored; it exists once its restore operation is done)", n.String())
	}
	return t, toStatus(err)
}

// --- responses ---

// tableProto renders a catalog entry in a view, as Cloud Bigtable does:
// NAME_ONLY is the name; SCHEMA_VIEW adds column families, granularity and
// deletion protection; REPLICATION_VIEW adds the one cluster's state; FULL
// has both.
func tableProto(name string, t meta.Table, view adminpb.Table_View) *adminpb.Table {
	out := &adminpb.Table{Name: name}
	schema := view == adminpb.Table_SCHEMA_VIEW || view == adminpb.Table_FULL
	replication := view == adminpb.Table_REPLICATION_VIEW || view == adminpb.Table_FULL || view == adminpb.Table_ENCRYPTION_VIEW
	if schema {
		out.ColumnFamilies = make(map[string]*adminpb.ColumnFamily, len(t.Families))
		for name, f := range t.Families {
			out.ColumnFamilies[name] = &adminpb.ColumnFamily{GcRule: gcPolicyToProto(f.GC), ValueType: valueTypeProto(f.ValueType)}
		}
		out.Granularity = adminpb.Table_MILLIS
		if t.Granularity == meta.GranularityMicros {
			out.Granularity = adminpb.Table_MICROS
		}
		out.DeletionProtection = t.DeletionProtection
	}
	if replication {
		// One replica, and a write is acknowledged only once durable:
		// the table is always READY and consistent.
		out.ClusterStates = map[string]*adminpb.Table_ClusterState{
			ClusterID: {ReplicationState: adminpb.Table_ClusterState_READY},
		}
	}
	return out
}

// --- tables ---

// CreateTable creates a table with its column families, GC policies,
// granularity, deletion protection and initial splits, records it in the
// catalog and opens its tablets. Fields of features Tabula lacks (change
// streams, automated backups, row key schemas, tiered storage, typed
// families) are UNIMPLEMENTED rather than ignored.
//
// It returns once every tablet of the table is served — with a Host that
// is a ServingWaiter (a cluster's master assigns the tablets after
// OpenTable), once it says so — so that reads and writes of any row
// succeed as soon as CreateTable has: a client writing at once met tablets
// still loading. If they are not served within Options.ServeTimeout (or
// the caller's deadline), the creation is undone and the answer is
// UNAVAILABLE naming the table: it then does not exist, and may be created
// again.
func (s *AdminService) CreateTable(ctx context.Context, req *adminpb.CreateTableRequest) (*adminpb.Table, error) {
	project, instance, err := s.parseParent("parent", req.GetParent())
	if err != nil {
		return nil, err
	}
	if err := meta.ValidateTableName(req.GetTableId()); err != nil {
		return nil, invalidArg("table_id", "%v", err)
	}
	n := tableName{id: meta.TableID{Instance: s.instance(instance), Table: req.GetTableId()}, project: project, instance: instance}
	t, err := s.newTable(n.id, req)
	if err != nil {
		return nil, err
	}

	unlock := s.locks.lock(n.id)
	defer unlock()
	if err := s.checkNameFree(ctx, "table_id", n); err != nil {
		return nil, err
	}
	if err := s.opts.Catalog.Create(ctx, t); err != nil {
		if errors.Is(err, meta.ErrTableExists) {
			return nil, status.Errorf(codes.AlreadyExists, "table %q already exists", n.String())
		}
		return nil, toStatus(err)
	}
	// Undo, so that the table either exists and is served or does not
	// exist; the client may have gone, the undo must still run.
	undo := func() {
		undo := context.WithoutCancel(ctx)
		_ = s.opts.Host.DropTable(undo, t)
		if derr := s.opts.Catalog.Delete(undo, n.id); derr != nil {
			s.opts.Logger.Error("undoing a table creation", "table", n.id, "err", derr)
		}
		_ = s.collectDir(undo, t.Dir()+"/")
	}
	if err := s.opts.Host.OpenTable(ctx, t); err != nil {
		undo()
		return nil, toStatus(fmt.Errorf("opening the tablets of %s: %w", n, err))
	}
	if err := s.waitServing(ctx, t); err != nil {
		undo()
		s.opts.Logger.Warn("table creation undone: its tablets were not served in time", "table", n.id, "tablets", len(t.Tablets), "err", err)
		return nil, status.Errorf(codes.Unavailable, "creating table %q: its %d tablets were not all served within %v or the call's deadline (%v); the table was not created, create it again", n.String(), len(t.Tablets), s.opts.ServeTimeout, err)
	}
	// An entry left without tablets for longer than
	// cluster.CreationInProgressFor is taken for a deletion a crash cut
	// short, and finished (FinishDeletions on another master): a
	// creation that slow must not report a table that is gone.
	if _, err := s.opts.Catalog.Get(ctx, n.id); errors.Is(err, meta.ErrTableNotFound) {
		_ = s.opts.Host.DropTable(context.WithoutCancel(ctx), t)
		return nil, status.Errorf(codes.Unavailable, "creating table %q took so long that a master took it for an interrupted deletion and removed it; create it again", n.String())
	}
	s.opts.Logger.Info("table created", "table", n.id, "families", len(t.Families), "tablets", len(t.Tablets))
	return tableProto(n.String(), t, adminpb.Table_SCHEMA_VIEW), nil
}

// waitServing waits, with a Host that is a ServingWaiter, until every
// tablet of t is served, for at most Options.ServeTimeout.
func (s *AdminService) waitServing(ctx context.Context, t meta.Table) error {
	w, ok := s.opts.Host.(ServingWaiter)
	if !ok {
		return nil // OpenTable served the table itself
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.ServeTimeout)
	defer cancel()
	return w.WaitServing(ctx, t)
}

// newTable checks a CreateTableRequest whole and returns the catalog entry.
func (s *AdminService) newTable(id meta.TableID, req *adminpb.CreateTableRequest) (meta.Table, error) {
	pt := req.GetTable()
	switch {
	case pt.GetChangeStreamConfig() != nil:
		return meta.Table{}, unimplemented("table.change_stream_config", "change streams")
	case pt.GetAutomatedBackupPolicy() != nil:
		return meta.Table{}, unimplemented("table.automated_backup_policy", "automated backups")
	case pt.GetRowKeySchema() != nil:
		return meta.Table{}, unimplemented("table.row_key_schema", "a row key schema")
	case pt.GetTieredStorageConfig() != nil:
		return meta.Table{}, unimplemented("table.tiered_storage_config", "tiered storage")
	case len(req.GetInitialSplits()) > s.opts.MaxInitialSplits:
		return meta.Table{}, invalidArg("initial_splits", "%d splits, the limit is %d", len(req.GetInitialSplits()), s.opts.MaxInitialSplits)
	case len(pt.GetColumnFamilies()) > s.opts.MaxFamilies:
		return meta.Table{}, invalidArg("table.column_families", "%d families, the limit is %d", len(pt.GetColumnFamilies()), s.opts.MaxFamilies)
	}
	t := meta.Table{
		ID:                 id,
		Families:           make(map[string]tabletdesc.Family, len(pt.GetColumnFamilies())),
		DeletionProtection: pt.GetDeletionProtection(),
		Created:            s.opts.Now().UTC(),
		Generation:         1,
	}
	switch pt.GetGranularity() {
	case adminpb.Table_TIMESTAMP_GRANULARITY_UNSPECIFIED, adminpb.Table_MILLIS:
		t.Granularity = meta.GranularityMillis
	case adminpb.Table_MICROS:
		t.Granularity = meta.GranularityMicros
	default:
		return meta.Table{}, invalidArg("table.granularity", "unknown timestamp granularity %v", pt.GetGranularity())
	}
	for _, name := range slices.Sorted(maps.Keys(pt.GetColumnFamilies())) {
		field := "table.column_families[" + strconv.Quote(name) + "]"
		f, err := s.family(field, name, pt.GetColumnFamilies()[name])
		if err != nil {
			return meta.Table{}, err
		}
		t.Families[name] = f
	}

	splits := make([][]byte, 0, len(req.GetInitialSplits()))
	for i, sp := range req.GetInitialSplits() {
		field := fmt.Sprintf("initial_splits[%d].key", i)
		if len(sp.GetKey()) == 0 {
			return meta.Table{}, invalidArg(field, "split keys must not be empty")
		}
		if len(sp.GetKey()) > s.opts.Limits.MaxRowKeyBytes {
			return meta.Table{}, invalidArg(field, "split key is %d bytes, the row key limit is %d", len(sp.GetKey()), s.opts.Limits.MaxRowKeyBytes)
		}
		splits = append(splits, sp.GetKey())
	}
	slices.SortFunc(splits, bytes.Compare)
	splits = slices.CompactFunc(splits, bytes.Equal)
	var start []byte
	for i := 0; i <= len(splits); i++ {
		var end []byte
		if i < len(splits) {
			end = bytes.Clone(splits[i])
		}
		tid := s.opts.NewTabletID(id, i)
		if err := tablet.ValidateID(tid); err != nil {
			return meta.Table{}, status.Errorf(codes.Internal, "master: %v", err)
		}
		t.Tablets = append(t.Tablets, meta.TabletRef{ID: tid, Start: start, End: end})
		start = end
	}
	return t, nil
}

// family checks a column family definition.
func (s *AdminService) family(field, name string, cf *adminpb.ColumnFamily) (tabletdesc.Family, error) {
	if err := validateFamilyName(field, name); err != nil {
		return tabletdesc.Family{}, err
	}
	agg, vt, err := familyType(field+".value_type", cf.GetValueType())
	if err != nil {
		return tabletdesc.Family{}, err
	}
	gc, err := gcPolicyFromProto(field+".gc_rule", cf.GetGcRule())
	if err != nil {
		return tabletdesc.Family{}, err
	}
	return tabletdesc.Family{Name: name, GC: gc, Aggregate: agg, ValueType: vt}, nil
}

func validateFamilyName(field, name string) error {
	if err := cell.ValidateFamilyName(field, name); err != nil {
		return toStatus(err)
	}
	if len(name) > MaxFamilyNameBytes {
		return invalidArg(field, "family name is %d bytes, the limit is %d", len(name), MaxFamilyNameBytes)
	}
	return nil
}

// ListTables lists an instance's tables, sorted by name, NAME_ONLY unless
// another view is asked for. page_size bounds a page (0: all); the page
// token is the last table name of the previous page.
func (s *AdminService) ListTables(ctx context.Context, req *adminpb.ListTablesRequest) (*adminpb.ListTablesResponse, error) {
	project, instance, err := s.parseParent("parent", req.GetParent())
	if err != nil {
		return nil, err
	}
	if req.GetPageSize() < 0 {
		return nil, invalidArg("page_size", "must not be negative, got %d", req.GetPageSize())
	}
	view := req.GetView()
	if view == adminpb.Table_VIEW_UNSPECIFIED {
		view = adminpb.Table_NAME_ONLY
	}
	tables, err := s.opts.Catalog.List(ctx, s.instance(instance))
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &adminpb.ListTablesResponse{}
	for _, t := range tables {
		if t.Restoring || (req.GetPageToken() != "" && t.ID.Table <= req.GetPageToken()) {
			continue // a table being restored exists once its operation is done
		}
		if req.GetPageSize() > 0 && len(resp.Tables) == int(req.GetPageSize()) {
			resp.NextPageToken = resp.Tables[len(resp.Tables)-1].Name[strings.LastIndex(resp.Tables[len(resp.Tables)-1].Name, "/")+1:]
			break
		}
		n := tableName{id: t.ID, project: project, instance: instance}
		resp.Tables = append(resp.Tables, tableProto(n.String(), t, view))
	}
	return resp, nil
}

// GetTable returns a table, in SCHEMA_VIEW unless another view is asked
// for; NOT_FOUND if there is none.
func (s *AdminService) GetTable(ctx context.Context, req *adminpb.GetTableRequest) (*adminpb.Table, error) {
	n, err := s.parseTable("name", req.GetName())
	if err != nil {
		return nil, err
	}
	t, err := s.get(ctx, n)
	if err != nil {
		return nil, err
	}
	view := req.GetView()
	if view == adminpb.Table_VIEW_UNSPECIFIED {
		view = adminpb.Table_SCHEMA_VIEW
	}
	return tableProto(n.String(), t, view), nil
}

// DeleteTable deletes a table and its data: FAILED_PRECONDITION while its
// deletion protection is on. With Options.UndeleteRetention the table is
// kept restorable (dropRestorably, undelete.go). Otherwise the tablets are dropped (an error closing them
// is logged, not returned: their data is being deleted), then the catalog
// entry, then the files (a crash before the last step leaves files that
// the next Start collects).
func (s *AdminService) DeleteTable(ctx context.Context, req *adminpb.DeleteTableRequest) (*emptypb.Empty, error) {
	n, err := s.parseTable("name", req.GetName())
	if err != nil {
		return nil, err
	}
	unlock := s.locks.lock(n.id)
	defer unlock()
	t, err := s.get(ctx, n)
	if err != nil {
		return nil, err
	}
	if t.DeletionProtection {
		return nil, status.Errorf(codes.FailedPrecondition, "table %q has deletion_protection on: turn it off (UpdateTable) before deleting the table", n.String())
	}
	if v := protectedView(t); v != "" {
		return nil, status.Errorf(codes.FailedPrecondition, "table %q has authorized view %q with deletion_protection on: turn it off or delete the view first", n.String(), v)
	}
	// From here on the table is going away; finish even if the client
	// does not wait.
	ctx = context.WithoutCancel(ctx)
	if s.retainsDropped() && !purgeRequested(ctx) {
		if err := s.dropRestorably(ctx, n, t); err != nil {
			return nil, toStatus(err)
		}
		s.opts.Logger.Info("table deleted; restorable by UndeleteTable", "table", n.id, "retention", s.opts.UndeleteRetention.String())
		return &emptypb.Empty{}, nil
	}
	if err := s.opts.Host.DropTable(ctx, t); err != nil {
		// The tablets failed to close cleanly (a flush failed): their
		// data is being deleted anyway, and stopping here would leave a
		// table in the catalog that no tablet serves.
		s.opts.Logger.Warn("dropping the tablets of a deleted table", "table", n.id, "err", err)
	}
	if err := s.deleteEntryAndFiles(ctx, n.id, t); err != nil {
		return nil, toStatus(err)
	}
	s.opts.Logger.Info("table deleted", "table", n.id)
	return &emptypb.Empty{}, nil
}

// deleteEntryAndFiles is the end of a deletion without retention, once
// the tablets are dropped: the catalog entry (already gone is fine: a
// master finishing the deletion at the same time, FinishDeletions), stale
// dropped-table records of the name, then the files.
func (s *AdminService) deleteEntryAndFiles(ctx context.Context, id meta.TableID, t meta.Table) error {
	if err := s.opts.Catalog.Delete(ctx, id); err != nil && !errors.Is(err, meta.ErrTableNotFound) {
		return err
	}
	if s.backupStore() != nil {
		// Records left by a crash while the table existed (see
		// DroppedPrefix) would keep the name taken.
		if err := s.deleteDropped(ctx, id); err != nil {
			s.opts.Logger.Warn("deleting stale dropped-table records", "table", id, "err", err)
		}
	}
	if err := s.collectDir(ctx, t.Dir()+"/"); err != nil {
		s.opts.Logger.Warn("deleting the files of a deleted table", "table", id, "err", err)
	}
	return nil
}

// FinishDeletions completes the deletions of tables that a crash cut short
// after their tablets were dropped and before their catalog entry was
// deleted: such a table is listed, but no tablet serves it, and it would
// stay so until someone repeated DeleteTable. A candidate is an entry not
// Restoring, created at least minAge ago, whose tablets the host reports
// gone (DroppedTabletsHost; other hosts finish nothing). With a retention
// and a live record of this very table (finishDeletion) only the entry
// goes, and the table stays restorable; otherwise the entry and the
// table's files go, as at the end of DeleteTable. minAge spares a table
// whose CreateTable is under way on another master, which writes the
// entry before the tablets' METADATA rows. Each table is finished under
// its lock, after reading its entry again. It returns how many tables it
// finished, and the errors of those it could not, joined.
func (s *AdminService) FinishDeletions(ctx context.Context, minAge time.Duration) (int, error) {
	h, ok := s.opts.Host.(DroppedTabletsHost)
	if !ok {
		return 0, nil
	}
	tables, err := s.opts.Catalog.List(ctx, "")
	if err != nil {
		return 0, err
	}
	now := s.opts.Now()
	finished := 0
	var errs []error
	for _, listed := range tables {
		if listed.Restoring || now.Sub(listed.Created) < minAge {
			continue
		}
		done, err := s.finishDeletionOf(ctx, h, listed.ID, minAge, now)
		if err != nil {
			errs = append(errs, fmt.Errorf("finishing the deletion of %s: %w", listed.ID, err))
		}
		if done {
			finished++
		}
	}
	return finished, errors.Join(errs...)
}

// finishDeletionOf is FinishDeletions' work on one table, under its lock.
func (s *AdminService) finishDeletionOf(ctx context.Context, h DroppedTabletsHost, id meta.TableID, minAge time.Duration, now time.Time) (bool, error) {
	unlock := s.locks.lock(id)
	defer unlock()
	t, err := s.opts.Catalog.Get(ctx, id)
	if errors.Is(err, meta.ErrTableNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if t.Restoring || now.Sub(t.Created) < minAge {
		return false, nil
	}
	gone, err := h.TabletsDropped(ctx, t)
	if err != nil || !gone {
		return false, err
	}
	n := tableName{id: id, project: "-", instance: id.Instance}
	if s.retainsDropped() {
		done, err := s.finishDeletion(ctx, n, t)
		if err != nil || done {
			return done, err
		}
		// No record of it: a deletion without retention (a purge) or a
		// creation that never wrote its rows.
	}
	if err := s.deleteEntryAndFiles(ctx, id, t); err != nil {
		return false, err
	}
	s.opts.Logger.Warn("finished a table deletion a crash cut short: its tablets were gone", "table", id)
	return true, nil
}

// update changes a table's catalog entry under its lock: it reads the
// entry, lets change check the request and modify the entry (nothing is
// written if it fails), persists the result and, if schema is set, applies
// the new schema to the tablets.
func (s *AdminService) update(ctx context.Context, n tableName, schema bool, change func(t *meta.Table) error) (meta.Table, error) {
	unlock := s.locks.lock(n.id)
	defer unlock()
	t, err := s.get(ctx, n)
	if err != nil {
		return meta.Table{}, err
	}
	t.Families = maps.Clone(t.Families)
	t.LocalityGroups = maps.Clone(t.LocalityGroups)
	if err := change(&t); err != nil {
		return meta.Table{}, err
	}
	t.Generation++
	if err := s.opts.Catalog.Update(ctx, t); err != nil {
		return meta.Table{}, toStatus(err)
	}
	if schema {
		if err := s.opts.Host.UpdateSchema(ctx, t); err != nil {
			// The catalog has the new schema: tablets that missed it get
			// it when the table is next opened or updated.
			return meta.Table{}, toStatus(fmt.Errorf("schema of %s saved, but applying it to the tablets failed: %w", n, err))
		}
	}
	return t, nil
}

// ModifyColumnFamilies creates, updates (GC rule) and drops column
// families. The modifications are checked in order against the schema as
// the earlier ones leave it, all before anything changes: creating a family
// that exists is ALREADY_EXISTS, updating or dropping one that does not is
// NOT_FOUND, dropping one of a table with deletion protection is
// FAILED_PRECONDITION, and any error changes nothing.
func (s *AdminService) ModifyColumnFamilies(ctx context.Context, req *adminpb.ModifyColumnFamiliesRequest) (*adminpb.Table, error) {
	n, err := s.parseTable("name", req.GetName())
	if err != nil {
		return nil, err
	}
	if len(req.GetModifications()) == 0 {
		return nil, invalidArg("modifications", "at least one modification is required")
	}
	t, err := s.update(ctx, n, true, func(t *meta.Table) error {
		if t.Families == nil {
			t.Families = make(map[string]tabletdesc.Family)
		}
		for i, m := range req.GetModifications() {
			field := fmt.Sprintf("modifications[%d]", i)
			id := m.GetId()
			if err := validateFamilyName(field+".id", id); err != nil {
				return err
			}
			old, exists := t.Families[id]
			switch mod := m.GetMod().(type) {
			case *adminpb.ModifyColumnFamiliesRequest_Modification_Create:
				if exists {
					return status.Errorf(codes.AlreadyExists, "%s.create: column family %q already exists in table %q", field, id, n.String())
				}
				if len(t.Families) >= s.opts.MaxFamilies {
					return invalidArg(field+".create", "table %q has %d families, the limit is %d", n.String(), len(t.Families), s.opts.MaxFamilies)
				}
				f, err := s.family(field+".create", id, mod.Create)
				if err != nil {
					return err
				}
				t.Families[id] = f
			case *adminpb.ModifyColumnFamiliesRequest_Modification_Update:
				if !exists {
					return status.Errorf(codes.NotFound, "%s.update: column family %q not found in table %q", field, id, n.String())
				}
				// No mask is the older API: the GC rule is updated.
				setGC, setType := len(m.GetUpdateMask().GetPaths()) == 0, false
				for j, p := range m.GetUpdateMask().GetPaths() {
					switch p {
					case "gc_rule":
						setGC = true
					case "value_type":
						setType = true
					default:
						return invalidArg(fmt.Sprintf("%s.update_mask.paths[%d]", field, j), "unknown column family field %q (gc_rule and value_type are the ones a family has)", p)
					}
				}
				f, err := s.family(field+".update", id, mod.Update)
				if err != nil {
					return err
				}
				// The family keeps its locality group.
				old.Name = id
				if setGC {
					old.GC = f.GC
				}
				if setType && !bytes.Equal(old.ValueType, f.ValueType) {
					// A declared type may change; an aggregate one
					// may not, nor may a family become one.
					if old.Aggregate != cell.NoAggregator || f.Aggregate != cell.NoAggregator {
						return errImmutableAggregate(field + ".update.value_type")
					}
					old.ValueType = f.ValueType
				}
				t.Families[id] = old
			case *adminpb.ModifyColumnFamiliesRequest_Modification_Drop:
				if !mod.Drop {
					return invalidArg(field+".drop", "must be true when set")
				}
				if !exists {
					return status.Errorf(codes.NotFound, "%s.drop: column family %q not found in table %q", field, id, n.String())
				}
				if t.DeletionProtection {
					return status.Errorf(codes.FailedPrecondition, "%s.drop: table %q has deletion_protection on, which protects its column families too", field, n.String())
				}
				delete(t.Families, id)
				// A family created again under this name starts
				// without the grants of the one dropped.
				t.ACL = t.ACL.WithoutFamily(id)
			default:
				return invalidArg(field, "one of create, update or drop must be set")
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return tableProto(n.String(), t, adminpb.Table_SCHEMA_VIEW), nil
}

// DropRowRange deletes the rows of a table that start with row_key_prefix,
// or all of them (delete_all_data_from_table).
func (s *AdminService) DropRowRange(ctx context.Context, req *adminpb.DropRowRangeRequest) (*emptypb.Empty, error) {
	n, err := s.parseTable("name", req.GetName())
	if err != nil {
		return nil, err
	}
	var prefix []byte
	switch target := req.GetTarget().(type) {
	case *adminpb.DropRowRangeRequest_RowKeyPrefix:
		if len(target.RowKeyPrefix) == 0 {
			return nil, invalidArg("row_key_prefix", "must not be empty (use delete_all_data_from_table to drop every row)")
		}
		if len(target.RowKeyPrefix) > s.opts.Limits.MaxRowKeyBytes {
			return nil, invalidArg("row_key_prefix", "prefix is %d bytes, the row key limit is %d", len(target.RowKeyPrefix), s.opts.Limits.MaxRowKeyBytes)
		}
		prefix = target.RowKeyPrefix
	case *adminpb.DropRowRangeRequest_DeleteAllDataFromTable:
		if !target.DeleteAllDataFromTable {
			return nil, invalidArg("delete_all_data_from_table", "must be true when set")
		}
	default:
		return nil, invalidArg("target", "one of row_key_prefix or delete_all_data_from_table must be set")
	}
	unlock := s.locks.lock(n.id)
	defer unlock()
	t, err := s.get(ctx, n)
	if err != nil {
		return nil, err
	}
	if err := s.opts.Host.DropRowRange(ctx, t, prefix); err != nil {
		return nil, toStatus(err)
	}
	return &emptypb.Empty{}, nil
}

// UpdateTable changes deletion_protection, the one updatable table field
// Tabula has. Cloud Bigtable answers with a long-running operation; Tabula
// finishes the change before answering, so the operation it returns is
// done and holds the table, and clients never need to poll it (those that
// do find it with GetOperation).
func (s *AdminService) UpdateTable(ctx context.Context, req *adminpb.UpdateTableRequest) (*longrunningpb.Operation, error) {
	n, err := s.parseTable("table.name", req.GetTable().GetName())
	if err != nil {
		return nil, err
	}
	paths := req.GetUpdateMask().GetPaths()
	if len(paths) == 0 {
		return nil, invalidArg("update_mask", "must name the fields to update")
	}
	for i, p := range paths {
		field := fmt.Sprintf("update_mask.paths[%d]", i)
		switch {
		case p == "deletion_protection":
		case p == "change_stream_config" || strings.HasPrefix(p, "change_stream_config."):
			return nil, unimplemented(field, "change streams")
		case p == "automated_backup_policy" || strings.HasPrefix(p, "automated_backup_policy."):
			return nil, unimplemented(field, "automated backups")
		case p == "row_key_schema":
			return nil, unimplemented(field, "a row key schema")
		case p == "tiered_storage_config" || strings.HasPrefix(p, "tiered_storage_config."):
			return nil, unimplemented(field, "tiered storage")
		default:
			return nil, invalidArg(field, "unknown or immutable table field %q", p)
		}
	}
	start := s.opts.Now()
	t, err := s.update(ctx, n, false, func(t *meta.Table) error {
		t.DeletionProtection = req.GetTable().GetDeletionProtection()
		return nil
	})
	if err != nil {
		return nil, err
	}
	md, err := anypb.New(&adminpb.UpdateTableMetadata{
		Name: n.String(), StartTime: timestamppb.New(start), EndTime: timestamppb.New(s.opts.Now()),
	})
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	resp, err := anypb.New(tableProto(n.String(), t, adminpb.Table_SCHEMA_VIEW))
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	op := &longrunningpb.Operation{
		Name:     fmt.Sprintf("operations/%s/operations/%d", n.String(), s.opSeq.Add(1)),
		Metadata: md,
		Done:     true,
		Result:   &longrunningpb.Operation_Response{Response: resp},
	}
	s.ops.add(op)
	return op, nil
}

// GenerateConsistencyToken returns a token for CheckConsistency. Tabula has
// one replica of every table and acknowledges a write only once durable, so
// any token is consistent at once; the RPCs exist so that clients'
// WaitForReplication works.
func (s *AdminService) GenerateConsistencyToken(ctx context.Context, req *adminpb.GenerateConsistencyTokenRequest) (*adminpb.GenerateConsistencyTokenResponse, error) {
	n, err := s.parseTable("name", req.GetName())
	if err != nil {
		return nil, err
	}
	if _, err := s.get(ctx, n); err != nil {
		return nil, err
	}
	return &adminpb.GenerateConsistencyTokenResponse{ConsistencyToken: strconv.FormatInt(s.opts.Now().UnixNano(), 10)}, nil
}

// CheckConsistency reports every token GenerateConsistencyToken may have
// given consistent (see there); a token it cannot have given (not its
// decimal nanoseconds, or from the future) is INVALID_ARGUMENT, as Cloud
// Bigtable refuses tokens it did not issue.
func (s *AdminService) CheckConsistency(ctx context.Context, req *adminpb.CheckConsistencyRequest) (*adminpb.CheckConsistencyResponse, error) {
	n, err := s.parseTable("name", req.GetName())
	if err != nil {
		return nil, err
	}
	if req.GetConsistencyToken() == "" {
		return nil, invalidArg("consistency_token", "must not be empty")
	}
	if ns, err := strconv.ParseInt(req.GetConsistencyToken(), 10, 64); err != nil || ns <= 0 || ns > s.opts.Now().UnixNano() {
		return nil, invalidArg("consistency_token", "%q is not a token GenerateConsistencyToken issued", req.GetConsistencyToken())
	}
	if _, err := s.get(ctx, n); err != nil {
		return nil, err
	}
	return &adminpb.CheckConsistencyResponse{Consistent: true}, nil
}
