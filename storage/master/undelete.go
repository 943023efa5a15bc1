package master

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/coord"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// Undelete. With Options.UndeleteRetention set, DeleteTable keeps a dropped
// table restorable: it flushes the table's memtables and writes a record
// much like a backup manifest — the catalog entry (schema, GC rules,
// aggregate types, authorized views, grants) and the states of all its
// tablets with their SSTable lists — before it drops the tablets and the
// catalog entry. The record expires after the retention; until then the
// sweep keeps every file it references (retainedByBackups), and
// UndeleteTable brings the table back by reference: new tablets whose
// states list the record's files, then the catalog entry.
//
// While a record is live the table is absent (ListTables, GetTable and the
// data API answer NOT_FOUND) and its name is taken: CreateTable and
// RestoreTable of it are FAILED_PRECONDITION until it is undeleted or the
// retention ends.
//
// Crash safety: the record is written before anything of the table is
// dropped and deleted only after the undeleted table is in the catalog, so
// a crash at any point leaves the table, or the record, or both (a record
// whose table exists is stale: it cannot be undeleted, keeps its files
// until it expires, and the next DeleteTable of the table writes a newer
// one, which UndeleteTable takes).
const (
	// DroppedPrefix holds the records:
	// dropped/<instance>/<table>/<deletion time, ns, hex>.json.
	DroppedPrefix = "dropped/"
	// DefaultUndeleteRetention is the retention of `tabula dev` and of a
	// cluster's master unless configured: Cloud Bigtable's 7 days.
	DefaultUndeleteRetention = 7 * 24 * time.Hour
)

// PurgeHeader is the request metadata key with which a DeleteTable skips
// the retention ("true"): the table and any record of its earlier
// deletions go at once, as with a zero retention. It is Tabula's, for
// scratch tables a tool drops and re-creates under one name (`tabula
// bench`, `tabula deletetable --purge`); Cloud Bigtable clients never send
// it.
const PurgeHeader = "x-tabula-purge"

// WithPurge returns ctx with PurgeHeader set on outgoing calls.
func WithPurge(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, PurgeHeader, "true")
}

// purgeRequested reports whether the incoming call carries PurgeHeader.
func purgeRequested(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return slices.Contains(md.Get(PurgeHeader), "true")
}

// DroppedTable is the record of a deleted table that UndeleteTable can
// bring back.
type DroppedTable struct {
	// Table is the catalog entry at the deletion, Tablets cleared.
	Table meta.Table `json:"table"`
	// Tablets are the states of the table's tablets after their
	// memtables were flushed, in key order, covering every row.
	Tablets    []tabletdesc.State `json:"tablets"`
	Deleted    time.Time          `json:"deleted"`
	ExpireTime time.Time          `json:"expire_time"`
	// object is the record's name in the store, when read from it.
	object string
}

// Files returns every SSTable the record references.
func (d DroppedTable) Files() []string {
	var out []string
	for _, st := range d.Tablets {
		out = append(out, st.Files()...)
	}
	return out
}

// droppedDir holds the records of a table's deletions; each deletion has
// its own object, named by its time, so that the sweep deleting an expired
// record never deletes a newer one of the same name.
func droppedDir(id meta.TableID) string {
	return DroppedPrefix + id.Instance + "/" + id.Table + "/"
}

func droppedName(id meta.TableID, deleted time.Time) string {
	return fmt.Sprintf("%s%016x.json", droppedDir(id), deleted.UnixNano())
}

func putDropped(ctx context.Context, store blob.Store, d DroppedTable) error {
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	return store.Put(ctx, droppedName(d.Table.ID, d.Deleted), b)
}

// listDropped reads the records under prefix; one deleted meanwhile is
// skipped.
func listDropped(ctx context.Context, store blob.Store, prefix string) ([]DroppedTable, error) {
	objs, err := store.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	var out []DroppedTable
	for _, o := range objs {
		if !strings.HasSuffix(o.Name, ".json") {
			continue
		}
		b, err := store.Get(ctx, o.Name)
		if blob.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var d DroppedTable
		if err := json.Unmarshal(b, &d); err != nil {
			return nil, fmt.Errorf("dropped-table record %s: %w", o.Name, err)
		}
		d.object = o.Name
		out = append(out, d)
	}
	return out, nil
}

// retainsDropped reports whether DeleteTable keeps dropped tables
// restorable: a retention is configured and the deployment has what it
// needs (the object store, the tablets' states, a host that flushes).
func (s *AdminService) retainsDropped() bool {
	_, flushes := s.opts.Host.(BackupHost)
	return s.opts.UndeleteRetention > 0 && s.backupStore() != nil && s.opts.States != nil && flushes
}

// restorable returns the newest live record of a deleted table of this ID,
// and live true; else the newest expired one (not yet swept), if any, and
// live false; a zero record if there is none. Any error reading them is
// returned (as a status).
func (s *AdminService) restorable(ctx context.Context, id meta.TableID) (DroppedTable, bool, error) {
	if s.backupStore() == nil {
		return DroppedTable{}, false, nil
	}
	recs, err := listDropped(ctx, s.backupStore(), droppedDir(id))
	if err != nil {
		return DroppedTable{}, false, toStatus(err)
	}
	now := s.opts.Now()
	var newest, newestLive DroppedTable
	for _, d := range recs {
		if d.Deleted.After(newest.Deleted) || newest.object == "" {
			newest = d
		}
		if now.Before(d.ExpireTime) && (d.Deleted.After(newestLive.Deleted) || newestLive.object == "") {
			newestLive = d
		}
	}
	if newestLive.object != "" {
		return newestLive, true, nil
	}
	return newest, false, nil
}

// DeletedTable returns the entry table id had when it was deleted (its
// schema and grants), from the newest record of its deletion that is
// still within its retention: the access guard decides UndeleteTable by
// the deleted table's own grants. meta.ErrTableNotFound (wrapped) when no
// such record exists.
func (s *AdminService) DeletedTable(ctx context.Context, id meta.TableID) (meta.Table, error) {
	rec, live, err := s.restorable(ctx, id)
	if err != nil {
		return meta.Table{}, err
	}
	if !live || rec.Table.ID == (meta.TableID{}) {
		return meta.Table{}, fmt.Errorf("%w: no restorable deletion of %s", meta.ErrTableNotFound, id)
	}
	return rec.Table, nil
}

// deleteDropped deletes every record of a table's deletions.
func (s *AdminService) deleteDropped(ctx context.Context, id meta.TableID) error {
	objs, err := s.backupStore().List(ctx, droppedDir(id))
	if err != nil {
		return err
	}
	for _, o := range objs {
		if err := s.backupStore().Delete(ctx, o.Name); err != nil && !blob.IsNotExist(err) {
			return err
		}
	}
	return nil
}

// errNameRestorable is CreateTable's and RestoreTable's answer for the name
// of a deleted table still restorable.
func errNameRestorable(field string, n tableName, d DroppedTable) error {
	return status.Errorf(codes.FailedPrecondition,
		"%s: table %q was deleted at %s and can be undeleted until %s (UndeleteTable); its name cannot be reused before then",
		field, n.String(), d.Deleted.UTC().Format(time.RFC3339), d.ExpireTime.UTC().Format(time.RFC3339))
}

// checkNameFree is FAILED_PRECONDITION naming field if a deleted table of
// n's name is restorable.
func (s *AdminService) checkNameFree(ctx context.Context, field string, n tableName) error {
	d, live, err := s.restorable(ctx, n.id)
	if err != nil {
		return err
	}
	if live {
		return errNameRestorable(field, n, d)
	}
	return nil
}

// dropRestorably is DeleteTable's work with a retention (t's lock held):
// it marks the table's directory, flushes every tablet and writes the
// record — from then on the table is restorable — then drops the tablets,
// records their final states (writes that raced the deletion and reached
// a memtable after the flush), and deletes the catalog entry. An error
// before the record is written deletes nothing.
func (s *AdminService) dropRestorably(ctx context.Context, n tableName, t meta.Table) error {
	store := s.backupStore()
	now := s.opts.Now()
	marker := pendingName(n.id.Instance, "delete-"+n.id.Table+"-"+strconv.FormatInt(now.UnixNano(), 10))
	if err := putPending(ctx, store, marker, t.Dir(), now); err != nil {
		return err
	}
	defer func() {
		if err := deletePending(context.WithoutCancel(ctx), store, marker); err != nil {
			s.opts.Logger.Warn("deleting a table deletion's pending marker", "marker", marker, "err", err)
		}
	}()
	states, err := s.opts.Host.(BackupHost).FlushTableStates(ctx, t)
	if err != nil {
		if done, ferr := s.finishDeletion(ctx, n, t); ferr != nil || done {
			return ferr
		}
		return status.Errorf(codes.Unavailable, "flushing %s before deleting it (it stays, nothing was deleted): %v", n, err)
	}
	rec := DroppedTable{Table: t, Tablets: states, Deleted: now.UTC(), ExpireTime: now.Add(s.opts.UndeleteRetention).UTC()}
	rec.Table.Tablets = nil
	if err := putDropped(ctx, store, rec); err != nil {
		return err
	}
	if err := s.opts.Host.DropTable(ctx, t); err != nil {
		s.opts.Logger.Warn("dropping the tablets of a deleted table", "table", n.id, "err", err)
	}
	if final, err := finalStates(ctx, s.opts.States, states); err != nil {
		// The record holds the table as of the flush: only writes
		// that raced the deletion can be missing from it.
		s.opts.Logger.Warn("reading the final states of a deleted table; the record keeps the states at the flush", "table", n.id, "err", err)
	} else if !sameFiles(final, states) {
		rec.Tablets = final
		if err := putDropped(ctx, store, rec); err != nil {
			s.opts.Logger.Warn("recording the final states of a deleted table; the record keeps the states at the flush", "table", n.id, "err", err)
		}
	}
	if err := s.opts.Catalog.Delete(ctx, n.id); err != nil && !errors.Is(err, meta.ErrTableNotFound) {
		// (Gone already: FinishDeletions on another master finished it.)
		return err
	}
	return nil
}

// DroppedTabletsHost is implemented by hosts that can tell that a table's
// tablets are gone (a cluster's METADATA has no row of it): what a master
// killed between dropping the tablets and deleting the catalog entry
// leaves.
type DroppedTabletsHost interface {
	TabletsDropped(ctx context.Context, t meta.Table) (bool, error)
}

// finishDeletion completes a deletion that a crash interrupted after its
// record was written and the tablets dropped, but before the catalog entry
// was deleted: if the host says t's tablets are gone and a live record of
// this very table (same creation time and generation) exists, it deletes
// the catalog entry and keeps that record. It reports whether it did.
func (s *AdminService) finishDeletion(ctx context.Context, n tableName, t meta.Table) (bool, error) {
	h, ok := s.opts.Host.(DroppedTabletsHost)
	if !ok {
		return false, nil
	}
	gone, err := h.TabletsDropped(ctx, t)
	if err != nil || !gone {
		return false, err
	}
	rec, live, err := s.restorable(ctx, n.id)
	if err != nil || !live || !rec.Table.Created.Equal(t.Created) || rec.Table.Generation != t.Generation {
		return false, err
	}
	s.opts.Logger.Warn("finishing an interrupted deletion: the tablets are gone and the record is whole", "table", n.id, "record", rec.object)
	return true, s.opts.Catalog.Delete(ctx, n.id)
}

// finalStates reads the saved states of the tablets of states, or of their
// split descendants, after the tablets were closed; an error if some
// state is missing or they do not cover the table.
func finalStates(ctx context.Context, store tablet.StateStore, states []tabletdesc.State) ([]tabletdesc.State, error) {
	var out []tabletdesc.State
	ids := make([]string, 0, len(states))
	for _, st := range states {
		ids = append(ids, st.ID)
	}
	seen := map[string]bool{}
	for len(ids) > 0 {
		id := ids[len(ids)-1]
		ids = ids[:len(ids)-1]
		if seen[id] {
			continue
		}
		seen[id] = true
		st, err := store.Load(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("tablet %s: %w", id, err)
		}
		if len(st.SplitInto) > 0 {
			ids = append(ids, st.SplitInto...)
			continue
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b tabletdesc.State) int { return bytes.Compare(a.Start, b.Start) })
	if err := covers(out); err != nil {
		return nil, err
	}
	return out, nil
}

// covers checks that states (sorted by start) are adjacent and cover
// every row.
func covers(states []tabletdesc.State) error {
	var at []byte
	for i, s := range states {
		if !bytes.Equal(s.Start, at) {
			return fmt.Errorf("rows from %q are not covered (or covered twice)", at)
		}
		if len(s.End) == 0 && i != len(states)-1 {
			return errors.New("tablets overlap at the end of the table")
		}
		at = s.End
	}
	if len(states) == 0 || len(at) != 0 {
		return fmt.Errorf("rows from %q are not covered", at)
	}
	return nil
}

// sameFiles reports whether a and b are the same tablets with the same
// files.
func sameFiles(a, b []tabletdesc.State) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || !slices.Equal(a[i].Files(), b[i].Files()) {
			return false
		}
	}
	return true
}

// UndeleteTable brings back a deleted table whose record is within its
// retention: same name, schema, authorized views, grants and every cell
// (as of the deletion), by reference to the files the record keeps. Cloud
// Bigtable answers with a long-running operation; Tabula references files
// rather than copying them, so the operation it returns is done and holds
// the table. NOT_FOUND naming `name` for a table never deleted, deleted
// without retention or past it; ALREADY_EXISTS for a table that exists.
func (s *AdminService) UndeleteTable(ctx context.Context, req *adminpb.UndeleteTableRequest) (*longrunningpb.Operation, error) {
	if err := s.backupsEnabled(); err != nil {
		return nil, err
	}
	n, err := s.parseTable("name", req.GetName())
	if err != nil {
		return nil, err
	}
	start := s.opts.Now()
	unlock := s.locks.lock(n.id)
	defer unlock()
	if t, err := s.opts.Catalog.Get(ctx, n.id); err == nil {
		if t.Restoring {
			// A creation a crash cut short (its master's successor has
			// not finished it yet): if it was an undelete of this table,
			// finishing it is this call's answer.
			return s.finishCutShortUndelete(ctx, n, t, start)
		}
		return nil, status.Errorf(codes.AlreadyExists, "name: table %q exists; only a deleted table can be undeleted", n.String())
	} else if !errors.Is(err, meta.ErrTableNotFound) {
		return nil, toStatus(err)
	}
	rec, live, err := s.restorable(ctx, n.id)
	if err != nil {
		return nil, err
	}
	if rec.Table.ID == (meta.TableID{}) {
		return nil, status.Errorf(codes.NotFound, "name: no deleted table %q to undelete (never deleted, or deleted while undelete retention was off)", n.String())
	}
	if !live {
		return nil, status.Errorf(codes.NotFound, "name: table %q was deleted at %s; its undelete retention ended at %s",
			n.String(), rec.Deleted.UTC().Format(time.RFC3339), rec.ExpireTime.UTC().Format(time.RFC3339))
	}
	// From here on the table is coming back; finish even if the client
	// does not wait.
	ctx = context.WithoutCancel(ctx)
	// Tablets of the deleted table a failed drop left (METADATA rows in
	// a cluster) would overlap the new ones.
	if err := s.opts.Host.DropTable(ctx, meta.Table{ID: n.id}); err != nil {
		return nil, toStatus(fmt.Errorf("clearing what is left of the deleted table's tablets: %w", err))
	}
	t := rec.Table
	t.Generation++
	t, err = s.createByReference(ctx, n, t, rec.Tablets, "undelete", nil)
	if err != nil {
		return nil, toStatus(err)
	}
	// The table is in the catalog (the commit point); the record is stale
	// now. The pending marker createByReference left keeps the files from
	// a sweep that read the tablets' references before the table existed.
	if err := s.backupStore().Delete(ctx, rec.object); err != nil && !blob.IsNotExist(err) {
		s.opts.Logger.Warn("deleting the record of an undeleted table (it expires by itself)", "table", n.id, "err", err)
	}
	s.opts.Logger.Info("table undeleted", "table", n.id, "tablets", len(t.Tablets), "deleted", rec.Deleted)
	return s.doneOperation(n.String(),
		&adminpb.UndeleteTableMetadata{Name: n.String(), StartTime: timestamppb.New(start), EndTime: timestamppb.New(s.opts.Now())},
		tableProto(n.String(), t, adminpb.Table_SCHEMA_VIEW))
}

// finishCutShortUndelete finishes t, a Restoring entry of table n found
// by UndeleteTable, and answers as UndeleteTable: done with the table when
// a live record of n's deletion remains (an undelete cut short after its
// entry and before it deleted the record — a RestoreTable cannot take the
// name of a restorable table), which it then deletes; ALREADY_EXISTS
// otherwise.
func (s *AdminService) finishCutShortUndelete(ctx context.Context, n tableName, t meta.Table, start time.Time) (*longrunningpb.Operation, error) {
	ctx = context.WithoutCancel(ctx)
	t, err := s.completeCreation(ctx, n, t)
	if err != nil {
		return nil, toStatus(err)
	}
	rec, live, err := s.restorable(ctx, n.id)
	if err != nil {
		return nil, err
	}
	if !live || rec.Table.ID == (meta.TableID{}) {
		return nil, status.Errorf(codes.AlreadyExists, "name: table %q exists; only a deleted table can be undeleted", n.String())
	}
	if err := s.backupStore().Delete(ctx, rec.object); err != nil && !blob.IsNotExist(err) {
		s.opts.Logger.Warn("deleting the record of an undeleted table (it expires by itself)", "table", n.id, "err", err)
	}
	s.opts.Logger.Info("table undeleted (an undelete cut short, finished)", "table", n.id, "tablets", len(t.Tablets), "deleted", rec.Deleted)
	return s.doneOperation(n.String(),
		&adminpb.UndeleteTableMetadata{Name: n.String(), StartTime: timestamppb.New(start), EndTime: timestamppb.New(s.opts.Now())},
		tableProto(n.String(), t, adminpb.Table_SCHEMA_VIEW))
}

// nothingToReplay is the redo point of a restored or undeleted tablet:
// no commit log holds a record of its new ID, so its first open replays
// nothing (a zero redo point would scan a whole log for none) and then
// saves the log's tail as its redo point, as every open does.
var nothingToReplay = tabletdesc.LogPosition{Segment: math.MaxUint64}

// createByReference creates table t (its schema; t.Tablets is replaced)
// with one new tablet per state in states whose files are the states'
// own — nothing is copied: the SSTables are immutable, and the sweep keeps
// a file while any tablet, backup or dropped-table record references it.
// First a pending marker naming every file is written, left to expire (see
// putPendingFiles); then the new tablets' states are saved; then the
// catalog entry is created — the commit point: before it nothing is
// visible and a crash leaves only unreferenced states — and the tablets
// opened. report, if set, gets the share of bytes whose tablets are saved.
// The caller holds t's lock and has checked that no table of its name
// exists.
func (s *AdminService) createByReference(ctx context.Context, n tableName, t meta.Table, states []tabletdesc.State, why string, report func(pct int32)) (meta.Table, error) {
	if len(states) == 0 {
		return meta.Table{}, errors.New("no tablets to restore")
	}
	var files []string
	var total, done int64
	for _, st := range states {
		files = append(files, st.Files()...)
		for _, g := range st.Groups {
			for _, f := range g {
				total += f.Size
			}
		}
	}
	now := s.opts.Now()
	marker := pendingName(n.id.Instance, why+"-"+n.id.Table+"-"+strconv.FormatInt(now.UnixNano(), 10))
	if err := putPendingFiles(ctx, s.backupStore(), marker, files, now); err != nil {
		return meta.Table{}, err
	}
	t.ID = n.id
	t.Tablets = nil
	for i, st := range states {
		id := s.opts.NewTabletID(n.id, i)
		if err := tablet.ValidateID(id); err != nil {
			return meta.Table{}, status.Errorf(codes.Internal, "master: %v", err)
		}
		ns := tabletdesc.State{ID: id, Start: st.Start, End: st.End, Groups: make(map[string][]tabletdesc.FileMeta, len(st.Groups)),
			FlushedSeq: st.FlushedSeq, LastSeq: st.LastSeq, Families: st.Families, Drops: st.Drops, RedoPoint: nothingToReplay}
		for g, fs := range st.Groups {
			ns.Groups[g] = slices.Clone(fs)
			for _, f := range fs {
				done += f.Size
			}
		}
		if err := s.opts.States.Save(ctx, ns); err != nil {
			return meta.Table{}, err
		}
		t.Tablets = append(t.Tablets, meta.TabletRef{ID: id, Start: st.Start, End: st.End})
		if report != nil && total > 0 {
			report(int32(done * 99 / total))
		}
	}
	t.Restoring = true
	if err := s.opts.Catalog.Create(ctx, t); err != nil {
		if errors.Is(err, meta.ErrTableExists) {
			return meta.Table{}, status.Errorf(codes.AlreadyExists, "table %q already exists", n.String())
		}
		return meta.Table{}, err
	}
	// The entry is the commit point, but it says Restoring: the table
	// stays hidden while its tablets are made known (METADATA rows in a
	// cluster), so a crash now leaves no half table in sight; the master
	// finishes the creation when it next leads (storage/cluster's
	// repairTables). A failure here (METADATA unavailable a moment) is
	// retried a few times first: the entry stays hidden until it is done.
	wait := completionRetryFirst
	for attempt := 1; ; attempt++ {
		done, err := s.completeCreation(ctx, n, t)
		if err == nil || attempt == completionAttempts || ctx.Err() != nil {
			return done, err
		}
		s.opts.Logger.Warn("finishing a table created by reference (retried)", "table", n.id, "attempt", attempt, "err", err)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return done, err
		}
		wait *= 2
	}
}

// completionAttempts bounds createByReference's attempts to finish a
// creation whose entry is written; the waits between them start at
// completionRetryFirst and double (about 3 s in all).
const (
	completionAttempts   = 5
	completionRetryFirst = 200 * time.Millisecond
)

// completeCreation finishes the creation of t, a Restoring entry (one
// createByReference just wrote, or one a crash left): it opens the
// table's tablets on the Host (in a cluster: writes the METADATA rows
// missing, each only if absent), clears the mark (FinishRestoring) and,
// with a ServingWaiter, waits for the tablets to be served. Every step may
// be repeated, also concurrently with the creator or the master's repair.
func (s *AdminService) completeCreation(ctx context.Context, n tableName, t meta.Table) (meta.Table, error) {
	if err := s.opts.Host.OpenTable(ctx, t); err != nil {
		return t, fmt.Errorf("created %s, but opening its tablets failed (the master finishes it): %w", n, err)
	}
	t, err := FinishRestoring(ctx, s.opts.Catalog, n.id)
	if err != nil {
		return t, fmt.Errorf("created %s, but clearing its restoring state failed (the master finishes it): %w", n, err)
	}
	// Bounded (Options.ServeTimeout): a caller without a deadline (a cut
	// short undelete being finished) must not wait for ever.
	if err := s.waitServing(ctx, t); err != nil {
		return t, fmt.Errorf("created %s, but its tablets are not served yet: %w", n, err)
	}
	return t, nil
}

// ServingWaiter is a TableHost that serves a new table's tablets only
// some time after OpenTable (a cluster's master assigns them): CreateTable
// waits for them before it returns, and createByReference once the
// table's entry is no longer Restoring, so that a new or restored table is
// readable and writable when its call or operation is done.
type ServingWaiter interface {
	// WaitServing returns once every tablet of t is served, or with ctx's
	// error.
	WaitServing(ctx context.Context, t meta.Table) error
}

// finishRestoringAttempts bounds the compare-and-sets of FinishRestoring
// that concurrent writers of the entry may make fail.
const finishRestoringAttempts = 5

// FinishRestoring clears the Restoring flag of table id's catalog entry —
// the table becomes visible — and returns the entry. The caller has made
// every tablet of the table known to the TableHost (in a cluster: written
// every METADATA row). An entry already cleared is returned as it is;
// meta.ErrTableNotFound if there is none. Two callers may race (a creator
// and a master repairing it): both succeed.
func FinishRestoring(ctx context.Context, catalog meta.Catalog, id meta.TableID) (meta.Table, error) {
	var err error
	for range finishRestoringAttempts {
		var t meta.Table
		if t, err = catalog.Get(ctx, id); err != nil || !t.Restoring {
			return t, err
		}
		t.Restoring = false
		t.Generation++
		if err = catalog.Update(ctx, t); err == nil {
			return t, nil
		}
		if !errors.Is(err, coord.ErrConflict) {
			return meta.Table{}, err
		}
	}
	return meta.Table{}, err
}
