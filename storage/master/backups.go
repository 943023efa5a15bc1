package master

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// BackupHost is the part of a TableHost that backups need: flushing a
// table's memtables and returning the saved states of all its tablets.
type BackupHost interface {
	// FlushTableStates flushes every tablet of t and returns their states in
	// key order, covering every row.
	FlushTableStates(ctx context.Context, t meta.Table) ([]tabletdesc.State, error)
}

// Limits of a backup's expire_time, from the time of the request: Cloud
// Bigtable's.
const (
	DefaultMinBackupExpiry = 6 * time.Hour
	MaxBackupExpiry        = 90 * 24 * time.Hour
)

// backupName is a parsed projects/P/instances/I/clusters/C/backups/B.
type backupName struct {
	project, instance, cluster, id string
	catalogInstance                string // the instance backups are kept under (instance-agnostic mapping)
}

func (n backupName) String() string {
	return "projects/" + n.project + "/instances/" + n.instance + "/clusters/" + n.cluster + "/backups/" + n.id
}

// parseCluster parses projects/P/instances/I/clusters/C ("-" for C means
// every cluster).
func (s *AdminService) parseCluster(field, name string) (backupName, error) {
	p := strings.Split(name, "/")
	if len(p) != 6 || p[0] != "projects" || p[2] != "instances" || p[4] != "clusters" || p[1] == "" || p[3] == "" || p[5] == "" {
		return backupName{}, invalidArg(field, "%q is not projects/<project>/instances/<instance>/clusters/<cluster>", name)
	}
	return backupName{project: p[1], instance: p[3], cluster: p[5], catalogInstance: s.instance(p[3])}, nil
}

func (s *AdminService) parseBackupName(field, name string) (backupName, error) {
	i := strings.LastIndex(name, "/backups/")
	if i < 0 {
		return backupName{}, invalidArg(field, "%q is not projects/<project>/instances/<instance>/clusters/<cluster>/backups/<backup>", name)
	}
	n, err := s.parseCluster(field, name[:i])
	if err != nil {
		return backupName{}, err
	}
	n.id = name[i+len("/backups/"):]
	if err := validateBackupID(field, n.id); err != nil {
		return backupName{}, err
	}
	return n, nil
}

// validateBackupID checks a backup ID as Cloud Bigtable does:
// [_a-zA-Z0-9][-_.a-zA-Z0-9]*, at most 50 characters.
func validateBackupID(field, id string) error {
	if err := meta.ValidateTableName(id); err != nil {
		return invalidArg(field, "backup id %q must match [_a-zA-Z0-9][-_.a-zA-Z0-9]* and have 1 to 50 characters", id)
	}
	return nil
}

func (s *AdminService) backupsEnabled() error {
	if s.backupStore() == nil || s.opts.States == nil {
		return status.Error(codes.Unimplemented, "backups need the object store and the tablet states (Options.BackupStore or Store, Options.States)")
	}
	return nil
}

// backupStore is where manifests are kept and SSTables read and copied.
func (s *AdminService) backupStore() blob.Store {
	if s.opts.BackupStore != nil {
		return s.opts.BackupStore
	}
	return s.opts.Store
}

// checkExpiry checks an expire_time against the limits at now.
func (s *AdminService) checkExpiry(field string, ts *timestamppb.Timestamp, now time.Time) (time.Time, error) {
	if ts == nil {
		return time.Time{}, invalidArg(field, "required")
	}
	if err := ts.CheckValid(); err != nil {
		return time.Time{}, invalidArg(field, "%v", err)
	}
	t := ts.AsTime()
	if min := s.minBackupExpiry(); t.Before(now.Add(min)) || !t.After(now) {
		return time.Time{}, invalidArg(field, "%s is less than %v from now (%s)", t.Format(time.RFC3339), min, now.UTC().Format(time.RFC3339))
	}
	if t.After(now.Add(MaxBackupExpiry)) {
		return time.Time{}, invalidArg(field, "%s is more than %v from now", t.Format(time.RFC3339), MaxBackupExpiry)
	}
	return t, nil
}

func (s *AdminService) minBackupExpiry() time.Duration {
	switch {
	case s.opts.MinBackupExpiry < 0:
		return 0
	case s.opts.MinBackupExpiry == 0:
		return DefaultMinBackupExpiry
	}
	return s.opts.MinBackupExpiry
}

// backupProto renders a manifest.
func backupProto(n backupName, m BackupManifest) *adminpb.Backup {
	out := &adminpb.Backup{
		Name:         n.String(),
		SourceTable:  "projects/" + n.project + "/instances/" + n.instance + "/tables/" + m.SourceTable,
		SourceBackup: m.SourceBackup,
		ExpireTime:   timestamppb.New(m.ExpireTime),
		StartTime:    timestamppb.New(m.StartTime),
		EndTime:      timestamppb.New(m.EndTime),
		SizeBytes:    m.SizeBytes,
		State:        adminpb.Backup_READY,
		BackupType:   adminpb.Backup_STANDARD,
		EncryptionInfo: &adminpb.EncryptionInfo{
			EncryptionType: adminpb.EncryptionInfo_GOOGLE_DEFAULT_ENCRYPTION,
		},
	}
	if m.Hot {
		out.BackupType = adminpb.Backup_HOT
	}
	if m.HotToStandardTime != nil {
		out.HotToStandardTime = timestamppb.New(*m.HotToStandardTime)
	}
	return out
}

// getBackup reads a backup: NOT_FOUND naming field for one that does not
// exist or has expired (expired backups are deleted by the next sweep).
func (s *AdminService) getBackup(ctx context.Context, field string, n backupName) (BackupManifest, error) {
	m, err := readManifest(ctx, s.backupStore(), manifestName(n.catalogInstance, n.id))
	if blob.IsNotExist(err) {
		return BackupManifest{}, status.Errorf(codes.NotFound, "%s: backup %q not found", field, n.String())
	}
	if err != nil {
		return BackupManifest{}, toStatus(err)
	}
	if !s.opts.Now().Before(m.ExpireTime) {
		return BackupManifest{}, status.Errorf(codes.NotFound, "%s: backup %q expired at %s", field, n.String(), m.ExpireTime.UTC().Format(time.RFC3339))
	}
	return m, nil
}

// CreateBackup backs a table up: it marks the table's directory (so no
// sweep deletes a file the backup is about to reference), flushes every
// tablet's memtable, and writes the manifest of the tablets' states — the
// commit point: a backup exists whole or not at all, also after a crash.
// The operation it returns is done.
func (s *AdminService) CreateBackup(ctx context.Context, req *adminpb.CreateBackupRequest) (*longrunningpb.Operation, error) {
	if err := s.backupsEnabled(); err != nil {
		return nil, err
	}
	n, err := s.parseCluster("parent", req.GetParent())
	if err != nil {
		return nil, err
	}
	n.id = req.GetBackupId()
	if err := validateBackupID("backup_id", n.id); err != nil {
		return nil, err
	}
	start := s.opts.Now()
	expire, err := s.checkExpiry("backup.expire_time", req.GetBackup().GetExpireTime(), start)
	if err != nil {
		return nil, err
	}
	m := BackupManifest{ID: n.id, Instance: n.catalogInstance, Cluster: n.cluster, ExpireTime: expire.UTC(), StartTime: start.UTC()}
	switch req.GetBackup().GetBackupType() {
	case adminpb.Backup_BACKUP_TYPE_UNSPECIFIED, adminpb.Backup_STANDARD:
		if req.GetBackup().GetHotToStandardTime() != nil {
			return nil, invalidArg("backup.hot_to_standard_time", "only a HOT backup has one")
		}
	case adminpb.Backup_HOT:
		m.Hot = true
		if ts := req.GetBackup().GetHotToStandardTime(); ts != nil {
			t := ts.AsTime().UTC()
			m.HotToStandardTime = &t
		}
	default:
		return nil, invalidArg("backup.backup_type", "unknown backup type %v", req.GetBackup().GetBackupType())
	}
	tn, err := s.parseTable("backup.source_table", req.GetBackup().GetSourceTable())
	if err != nil {
		return nil, err
	}
	if _, ok := s.opts.Host.(BackupHost); !ok {
		return nil, status.Error(codes.Unimplemented, "CreateBackup: the tablet servers of this deployment cannot flush a table for a backup")
	}
	// One backup of an ID at a time; the table's lock keeps the schema
	// still while it is read.
	unlock := s.locks.lock(meta.TableID{Instance: "\x00backups/" + n.catalogInstance, Table: n.id})
	defer unlock()
	if _, err := readManifest(ctx, s.backupStore(), manifestName(n.catalogInstance, n.id)); err == nil {
		return nil, status.Errorf(codes.AlreadyExists, "backup %q already exists", n.String())
	} else if !blob.IsNotExist(err) {
		return nil, toStatus(err)
	}
	t, err := s.get(ctx, tn)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), PendingMarkerTTL/2)
	defer cancel()
	marker := pendingName(n.catalogInstance, "backup-"+n.id)
	if err := putPending(ctx, s.backupStore(), marker, t.Dir(), s.opts.Now()); err != nil {
		return nil, toStatus(err)
	}
	defer func() {
		if err := deletePending(context.WithoutCancel(ctx), s.backupStore(), marker); err != nil {
			s.opts.Logger.Warn("deleting a backup's pending marker", "marker", marker, "err", err)
		}
	}()
	states, err := s.opts.Host.(BackupHost).FlushTableStates(ctx, t)
	if err != nil {
		return nil, toStatus(fmt.Errorf("flushing %s for the backup: %w", tn, err))
	}
	m.SourceTable = t.ID.Table
	m.Schema = t
	m.Schema.Tablets, m.Schema.AuthorizedViews = nil, nil
	m.Tablets = states
	for _, st := range states {
		for _, g := range st.Groups {
			for _, f := range g {
				m.SizeBytes += f.Size
			}
		}
	}
	m.EndTime = s.opts.Now().UTC()
	if err := putManifest(ctx, s.backupStore(), m); err != nil {
		return nil, toStatus(err)
	}
	s.opts.Logger.Info("backup created", "backup", n.String(), "table", tn.id, "tablets", len(states), "bytes", m.SizeBytes)
	return s.doneOperation(n.String(),
		&adminpb.CreateBackupMetadata{Name: n.String(), SourceTable: tn.String(), StartTime: timestamppb.New(m.StartTime), EndTime: timestamppb.New(m.EndTime)},
		backupProto(n, m))
}

// GetBackup returns a backup; NOT_FOUND if there is none or it expired.
func (s *AdminService) GetBackup(ctx context.Context, req *adminpb.GetBackupRequest) (*adminpb.Backup, error) {
	if err := s.backupsEnabled(); err != nil {
		return nil, err
	}
	n, err := s.parseBackupName("name", req.GetName())
	if err != nil {
		return nil, err
	}
	m, err := s.getBackup(ctx, "name", n)
	if err != nil {
		return nil, err
	}
	return backupProto(n, m), nil
}

// ListBackups lists an instance's unexpired backups (cluster "-" or any
// other: Tabula has one), filtered and ordered as Cloud Bigtable documents
// (backupfilter.go; newest first by default). The page token is the
// offset of the page's first backup in that order.
func (s *AdminService) ListBackups(ctx context.Context, req *adminpb.ListBackupsRequest) (*adminpb.ListBackupsResponse, error) {
	if err := s.backupsEnabled(); err != nil {
		return nil, err
	}
	n, err := s.parseCluster("parent", req.GetParent())
	if err != nil {
		return nil, err
	}
	match, err := parseBackupFilter(req.GetFilter())
	if err != nil {
		return nil, invalidArg("filter", "%v", err)
	}
	order, err := parseBackupOrder(req.GetOrderBy())
	if err != nil {
		return nil, invalidArg("order_by", "%v", err)
	}
	if req.GetPageSize() < 0 {
		return nil, invalidArg("page_size", "must not be negative, got %d", req.GetPageSize())
	}
	offset := 0
	if tok := req.GetPageToken(); tok != "" {
		if offset, err = strconv.Atoi(tok); err != nil || offset < 0 {
			return nil, invalidArg("page_token", "%q is not a token ListBackups returned", tok)
		}
	}
	ms, err := listManifests(ctx, s.backupStore(), BackupsPrefix+n.catalogInstance+"/")
	if err != nil {
		return nil, toStatus(err)
	}
	now := s.opts.Now()
	var all []*adminpb.Backup
	for _, m := range ms {
		if !now.Before(m.ExpireTime) {
			continue
		}
		bn := n
		bn.id = m.ID
		if bn.cluster == "-" {
			bn.cluster = m.Cluster
		}
		if b := backupProto(bn, m); match(b) {
			all = append(all, b)
		}
	}
	slices.SortFunc(all, order)
	resp := &adminpb.ListBackupsResponse{}
	if offset < len(all) {
		all = all[offset:]
		if ps := int(req.GetPageSize()); ps > 0 && len(all) > ps {
			all = all[:ps]
			resp.NextPageToken = strconv.Itoa(offset + ps)
		}
		resp.Backups = all
	}
	return resp, nil
}

// UpdateBackup changes expire_time (within the limits, from now) and a hot
// backup's hot_to_standard_time.
func (s *AdminService) UpdateBackup(ctx context.Context, req *adminpb.UpdateBackupRequest) (*adminpb.Backup, error) {
	if err := s.backupsEnabled(); err != nil {
		return nil, err
	}
	n, err := s.parseBackupName("backup.name", req.GetBackup().GetName())
	if err != nil {
		return nil, err
	}
	paths := req.GetUpdateMask().GetPaths()
	if len(paths) == 0 {
		return nil, invalidArg("update_mask", "must name the fields to update (expire_time, hot_to_standard_time)")
	}
	unlock := s.locks.lock(meta.TableID{Instance: "\x00backups/" + n.catalogInstance, Table: n.id})
	defer unlock()
	m, err := s.getBackup(ctx, "backup.name", n)
	if err != nil {
		return nil, err
	}
	for i, p := range paths {
		switch p {
		case "expire_time":
			t, err := s.checkExpiry("backup.expire_time", req.GetBackup().GetExpireTime(), s.opts.Now())
			if err != nil {
				return nil, err
			}
			m.ExpireTime = t.UTC()
		case "hot_to_standard_time":
			if !m.Hot {
				return nil, invalidArg("backup.hot_to_standard_time", "backup %q is not a HOT backup", n.String())
			}
			m.HotToStandardTime = nil
			if ts := req.GetBackup().GetHotToStandardTime(); ts != nil {
				t := ts.AsTime().UTC()
				m.HotToStandardTime = &t
			}
		default:
			return nil, invalidArg(fmt.Sprintf("update_mask.paths[%d]", i), "unknown or immutable backup field %q (expire_time and hot_to_standard_time may change)", p)
		}
	}
	if err := putManifest(ctx, s.backupStore(), m); err != nil {
		return nil, toStatus(err)
	}
	return backupProto(n, m), nil
}

// DeleteBackup deletes a backup's manifest; its files go with the next
// sweep unless a table or another backup references them.
func (s *AdminService) DeleteBackup(ctx context.Context, req *adminpb.DeleteBackupRequest) (*emptypb.Empty, error) {
	if err := s.backupsEnabled(); err != nil {
		return nil, err
	}
	n, err := s.parseBackupName("name", req.GetName())
	if err != nil {
		return nil, err
	}
	unlock := s.locks.lock(meta.TableID{Instance: "\x00backups/" + n.catalogInstance, Table: n.id})
	defer unlock()
	if _, err := s.getBackup(ctx, "name", n); err != nil {
		return nil, err
	}
	if err := s.backupStore().Delete(ctx, manifestName(n.catalogInstance, n.id)); err != nil && !blob.IsNotExist(err) {
		return nil, toStatus(err)
	}
	s.opts.Logger.Info("backup deleted", "backup", n.String())
	return &emptypb.Empty{}, nil
}

// CopyBackup copies a backup within the instance: a new manifest that
// references the same files (nothing is copied). Across instances it is
// UNIMPLEMENTED. The operation it returns is done.
func (s *AdminService) CopyBackup(ctx context.Context, req *adminpb.CopyBackupRequest) (*longrunningpb.Operation, error) {
	if err := s.backupsEnabled(); err != nil {
		return nil, err
	}
	dst, err := s.parseCluster("parent", req.GetParent())
	if err != nil {
		return nil, err
	}
	dst.id = req.GetBackupId()
	if err := validateBackupID("backup_id", dst.id); err != nil {
		return nil, err
	}
	src, err := s.parseBackupName("source_backup", req.GetSourceBackup())
	if err != nil {
		return nil, err
	}
	if src.catalogInstance != dst.catalogInstance {
		return nil, unimplemented("parent", "copying a backup to another instance")
	}
	now := s.opts.Now()
	expire, err := s.checkExpiry("expire_time", req.GetExpireTime(), now)
	if err != nil {
		return nil, err
	}
	unlock := s.locks.lock(meta.TableID{Instance: "\x00backups/" + dst.catalogInstance, Table: dst.id})
	defer unlock()
	if _, err := readManifest(ctx, s.backupStore(), manifestName(dst.catalogInstance, dst.id)); err == nil {
		return nil, status.Errorf(codes.AlreadyExists, "backup %q already exists", dst.String())
	} else if !blob.IsNotExist(err) {
		return nil, toStatus(err)
	}
	// The source's manifest keeps the files until the copy's exists:
	// the copy is written while the source is read unexpired.
	m, err := s.getBackup(ctx, "source_backup", src)
	if err != nil {
		return nil, err
	}
	m.ID, m.Cluster, m.SourceBackup = dst.id, dst.cluster, src.String()
	m.ExpireTime = expire.UTC()
	if err := putManifest(ctx, s.backupStore(), m); err != nil {
		return nil, toStatus(err)
	}
	info := &adminpb.BackupInfo{Backup: src.String(), StartTime: timestamppb.New(m.StartTime), EndTime: timestamppb.New(m.EndTime),
		SourceTable: "projects/" + src.project + "/instances/" + src.instance + "/tables/" + m.SourceTable}
	return s.doneOperation(dst.String(),
		&adminpb.CopyBackupMetadata{Name: dst.String(), SourceBackupInfo: info, Progress: &adminpb.OperationProgress{ProgressPercent: 100, StartTime: timestamppb.New(now), EndTime: timestamppb.New(s.opts.Now())}},
		backupProto(dst, m))
}

// RestoreTable creates a new table from a backup, as a long-running
// operation: it returns at once an operation whose metadata reports the
// progress (the share of the backup's bytes whose tablets are saved), and
// GetOperation reports it done with the table once the table is created.
// Nothing is copied: the new tablets' states reference the backup's
// SSTables, which the source table, the backup and the restored table then
// share (the sweep keeps a file while any of them references it, so
// deleting the backup or the source never touches the restored table's
// files; its compactions write its own). The states are saved, and then
// the catalog entry is created — the commit point: before it, nothing is
// visible and a crash leaves only states no table references.
// ALREADY_EXISTS for a table that exists, FAILED_PRECONDITION for the name
// of a deleted table still restorable (UndeleteTable), NOT_FOUND for an
// unknown or expired backup.
func (s *AdminService) RestoreTable(ctx context.Context, req *adminpb.RestoreTableRequest) (*longrunningpb.Operation, error) {
	if err := s.backupsEnabled(); err != nil {
		return nil, err
	}
	project, instance, err := s.parseParent("parent", req.GetParent())
	if err != nil {
		return nil, err
	}
	if err := meta.ValidateTableName(req.GetTableId()); err != nil {
		return nil, invalidArg("table_id", "%v", err)
	}
	if req.GetBackup() == "" {
		return nil, invalidArg("backup", "required (the backup to restore)")
	}
	bn, err := s.parseBackupName("backup", req.GetBackup())
	if err != nil {
		return nil, err
	}
	if bn.catalogInstance != s.instance(instance) {
		return nil, unimplemented("parent", "restoring into another instance than the backup's")
	}
	tn := tableName{id: meta.TableID{Instance: s.instance(instance), Table: req.GetTableId()}, project: project, instance: instance}
	m, err := s.getBackup(ctx, "backup", bn)
	if err != nil {
		return nil, err
	}
	if t, err := s.opts.Catalog.Get(ctx, tn.id); err == nil {
		return nil, alreadyExists(tn, t)
	}
	if err := s.checkNameFree(ctx, "table_id", tn); err != nil {
		return nil, err
	}
	start := s.opts.Now()
	opName := fmt.Sprintf("operations/%s/operations/%d", tn.String(), s.opSeq.Add(1))
	info := &adminpb.BackupInfo{Backup: bn.String(), StartTime: timestamppb.New(m.StartTime), EndTime: timestamppb.New(m.EndTime),
		SourceTable: "projects/" + bn.project + "/instances/" + bn.instance + "/tables/" + m.SourceTable}
	progress := func(pct int32, end bool) *longrunningpb.Operation {
		md := &adminpb.RestoreTableMetadata{Name: tn.String(), SourceType: adminpb.RestoreSourceType_BACKUP,
			SourceInfo: &adminpb.RestoreTableMetadata_BackupInfo{BackupInfo: info},
			Progress:   &adminpb.OperationProgress{ProgressPercent: pct, StartTime: timestamppb.New(start)}}
		if end {
			md.Progress.EndTime = timestamppb.New(s.opts.Now())
		}
		a, _ := anypb.New(md)
		return &longrunningpb.Operation{Name: opName, Metadata: a}
	}
	s.ops.add(progress(0, false))
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), PendingMarkerTTL/2)
		defer cancel()
		t, err := s.restore(ctx, tn, m, func(pct int32) { s.ops.add(progress(pct, false)) })
		op := progress(100, true)
		if err != nil {
			st := status.Convert(toStatus(err))
			op.Result = &longrunningpb.Operation_Error{Error: st.Proto()}
			s.opts.Logger.Warn("restore failed", "table", tn.id, "backup", bn.String(), "err", err)
		} else {
			resp, _ := anypb.New(tableProto(tn.String(), t, adminpb.Table_SCHEMA_VIEW))
			op.Result = &longrunningpb.Operation_Response{Response: resp}
			s.opts.Logger.Info("table restored", "table", tn.id, "backup", bn.String(), "tablets", len(t.Tablets))
		}
		op.Done = true
		s.ops.add(op)
	}()
	return proto.Clone(progress(0, false)).(*longrunningpb.Operation), nil
}

// alreadyExists is RestoreTable's answer for name n whose entry t exists:
// ALREADY_EXISTS, saying so when t is still being restored (hidden until
// its creator or the next active master finishes it).
func alreadyExists(n tableName, t meta.Table) error {
	if t.Restoring {
		return status.Errorf(codes.AlreadyExists, "table %q already exists: it is being restored (hidden until its restore is done)", n.String())
	}
	return status.Errorf(codes.AlreadyExists, "table %q already exists", n.String())
}

// restore does RestoreTable's work (see there): the new table's tablets
// reference the backup's SSTables (createByReference).
func (s *AdminService) restore(ctx context.Context, tn tableName, m BackupManifest, report func(pct int32)) (meta.Table, error) {
	unlock := s.locks.lock(tn.id)
	defer unlock()
	if t, err := s.opts.Catalog.Get(ctx, tn.id); err == nil {
		return meta.Table{}, alreadyExists(tn, t)
	}
	if err := s.checkNameFree(ctx, "table_id", tn); err != nil {
		return meta.Table{}, err
	}
	t := m.Schema
	t.Created = s.opts.Now().UTC()
	t.Generation = 1
	t.DeletionProtection = false
	t.AuthorizedViews = nil
	return s.createByReference(ctx, tn, t, m.Tablets, "restore", report)
}
