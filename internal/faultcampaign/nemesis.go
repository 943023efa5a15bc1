package faultcampaign

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"syscall"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/cluster/clusterpb"
	"github.com/tabuladb/tabula/storage/cluster/statuspage"
	"github.com/tabuladb/tabula/storage/master/adminextpb"
	"github.com/tabuladb/tabula/storage/meta"
)

// The fault kinds of the nemesis (HBase ChaosMonkey's, on a Tabula
// cluster).
const (
	KillServer     = "kill-server"     // kill -9 of a tablet server, restarted on its address
	PauseServer    = "pause-server"    // SIGSTOP, hold, SIGCONT of a tablet server
	PauseMaster    = "pause-master"    // SIGSTOP, hold, SIGCONT of the active master
	KillMaster     = "kill-master"     // kill -9 of the active master, restarted as a standby
	PauseMinIO     = "pause-minio"     // SIGSTOP, hold, SIGCONT of the object store
	RestartMinIO   = "restart-minio"   // MinIO stopped and started again
	RestartConsul  = "restart-consul"  // the Consul agent stopped and started again (state on disk)
	MoveTablet     = "move"            // a hot tablet unloaded on its server: the master reassigns it
	SplitTablet    = "split"           // a forced split of a hot tablet (TabletOperations.SplitTablet)
	MergeTablets   = "merge"           // a hot tablet merged with its right neighbour (TabletOperations.MergeTablets)
	MajorCompact   = "compact"         // major compactions of the hot tablets (TabletOperations.CompactTablet)
	SchemaChange   = "schema"          // column families added, re-policied and dropped under load
	CorruptSSTable = "corrupt-sstable" // an SSTable object's bytes damaged: reads must fail naming it
)

// AllKinds lists every kind, in the order of the report.
var AllKinds = []string{KillServer, PauseServer, PauseMaster, KillMaster, PauseMinIO, RestartMinIO, RestartConsul,
	MoveTablet, SplitTablet, MergeTablets, MajorCompact, SchemaChange, CorruptSSTable}

// Skipped names the kinds the campaign cannot apply yet, with the reason
// (none left: merges, forced splits and compactions go through the admin
// extension's TabletOperations).
var Skipped = map[string]string{}

// Fault is one fault the nemesis applied.
type Fault struct {
	Kind   string
	Target string
	Start  time.Duration // injected, since the campaign's start
	Healed time.Duration // healed (process back, pause ended)
	End    time.Duration // the next fault's start (or the end of the load)
	Note   string        // what was observed (the corruption's error, ...)
	Err    string        // the fault could not be applied or checked
	// Unavailable is the longest time, within [Start, End), that some hot
	// row had no successful operation.
	Unavailable time.Duration
	// Waited is the longest a caller of a hot row, called within [Start,
	// End), waited for a success of that row (longestWait): the
	// unavailability a retrying client saw, without the stretches in
	// which no worker asked for the row.
	Waited time.Duration
	// RowsStalled counts the hot rows that went more than 2 s without a
	// successful operation within [Start, End): the fault's reach (a
	// server's tablets, or every row when METADATA or the gateway stalls).
	RowsStalled int
	// ClientStall is the longest time, within [Start, End), that every
	// worker of one client library (ClientStalled: "official" or
	// "tabula") went without a successful operation on any row. The
	// per-row figures miss a library stalled whole — its rows kept going
	// by the other's workers — as the official clients were behind a
	// paused entry server (RELIABILITY item 46). A library stalls whole
	// also when each of its few workers waits out its deadline on a row
	// that is down: read it against the other library's figure and the
	// rows' (Unavailable).
	ClientStall   time.Duration
	ClientStalled string
}

// addNote appends to the fault's note.
func (f *Fault) addNote(s string) {
	if f.Note != "" {
		s = f.Note + "; " + s
	}
	f.Note = s
}

// Nemesis applies faults to a Cluster.
type Nemesis struct {
	C       *Cluster
	Admin   *bigtable.AdminClient
	Data    *bigtable.Client // official, for the victim table
	Table   string           // the hot table
	Victim  string           // a table the corruption is applied to
	Rows    []string
	History *History
	Rand    *rand.Rand
	Log     func(format string, args ...any)

	schemaN int
}

func (n *Nemesis) pickServer() *Proc {
	var live []*Proc
	for _, s := range n.C.Servers {
		if s.Alive() {
			live = append(live, s)
		}
	}
	if len(live) == 0 {
		return nil
	}
	return live[n.Rand.IntN(len(live))]
}

// activeMaster waits for a master to lead (a standby takes over some
// seconds after the active one died), up to a minute, noting the wait in
// f: the time a cluster goes without a master is a figure of the run,
// a minute without one is a fault error.
func (n *Nemesis) activeMaster(ctx context.Context, f *Fault) (*Proc, error) {
	start := time.Now()
	for {
		if m := n.C.ActiveMaster(); m != nil {
			if w := time.Since(start); w > time.Second {
				f.addNote(fmt.Sprintf("waited %.1f s for an active master", w.Seconds()))
			}
			return m, nil
		}
		if time.Since(start) > time.Minute {
			return nil, errors.New("no active master for a minute")
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (n *Nemesis) hold(ctx context.Context, lo, hi time.Duration) {
	d := lo + time.Duration(n.Rand.Int64N(int64(hi-lo)+1))
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// Apply injects one fault of kind, holds it, heals it, and returns it.
func (n *Nemesis) Apply(ctx context.Context, kind string) Fault {
	f := Fault{Kind: kind, Start: n.History.Since(time.Now())}
	err := n.apply(ctx, kind, &f)
	if err != nil {
		f.Err = err.Error()
	}
	f.Healed = n.History.Since(time.Now())
	return f
}

func (n *Nemesis) apply(ctx context.Context, kind string, f *Fault) error {
	switch kind {
	case KillServer:
		s := n.pickServer()
		if s == nil {
			return errors.New("no live tablet server")
		}
		f.Target = s.Name
		s.held.Store(true)
		defer s.held.Store(false)
		s.Kill(syscall.SIGKILL)
		n.hold(ctx, time.Second, 3*time.Second)
		return n.C.Restart(ctx, s)
	case PauseServer:
		s := n.pickServer()
		if s == nil {
			return errors.New("no live tablet server")
		}
		f.Target = s.Name
		if err := s.Signal(syscall.SIGSTOP); err != nil {
			return err
		}
		// Sometimes past the session TTL (10 s): the master ends the
		// session and reassigns; the continued server must not serve.
		n.hold(ctx, 2*time.Second, 14*time.Second)
		return s.Signal(syscall.SIGCONT)
	case PauseMaster:
		m, err := n.activeMaster(ctx, f)
		if err != nil {
			return err
		}
		f.Target = m.Name
		if err := m.Signal(syscall.SIGSTOP); err != nil {
			return err
		}
		n.hold(ctx, 2*time.Second, 14*time.Second)
		return m.Signal(syscall.SIGCONT)
	case KillMaster:
		m, err := n.activeMaster(ctx, f)
		if err != nil {
			return err
		}
		f.Target = m.Name
		m.held.Store(true)
		defer m.held.Store(false)
		m.Kill(syscall.SIGKILL)
		n.hold(ctx, time.Second, 3*time.Second)
		return n.C.Restart(ctx, m)
	case PauseMinIO:
		f.Target = "minio"
		if err := n.C.MinIO.Signal(syscall.SIGSTOP); err != nil {
			return err
		}
		n.hold(ctx, 2*time.Second, 8*time.Second)
		return n.C.MinIO.Signal(syscall.SIGCONT)
	case RestartMinIO:
		f.Target = "minio"
		n.C.MinIO.Kill(syscall.SIGTERM)
		n.hold(ctx, time.Second, 3*time.Second)
		return n.C.Restart(ctx, n.C.MinIO)
	case RestartConsul:
		f.Target = "consul"
		n.C.Consul.Kill(syscall.SIGTERM)
		n.hold(ctx, time.Second, 3*time.Second)
		return n.C.Restart(ctx, n.C.Consul)
	case MoveTablet:
		return n.move(ctx, f)
	case SplitTablet:
		return n.split(ctx, f)
	case SchemaChange:
		return n.schema(ctx, f)
	case MajorCompact:
		return n.compact(ctx, f)
	case MergeTablets:
		return n.merge(ctx, f)
	case CorruptSSTable:
		return n.corrupt(ctx, f)
	}
	return fmt.Errorf("kind %s cannot be applied", kind)
}

// hotTablets returns, per live server, the tablets of table it serves.
func (n *Nemesis) servedTablets(table string) map[*Proc][]statuspage.TabletStatus {
	out := map[*Proc][]statuspage.TabletStatus{}
	for _, s := range n.C.Servers {
		if !s.Alive() {
			continue
		}
		var st statuspage.ServerStatus
		if err := getJSON(s.HTTP+"/status?format=json", &st); err != nil {
			continue
		}
		for _, t := range st.Tablets {
			if strings.HasSuffix(t.Table, "/"+table) || t.Table == table {
				out[s] = append(out[s], t)
			}
		}
	}
	return out
}

// unload asks server s to unload tablet id (the master then assigns it
// again, to it or another server).
func unload(ctx context.Context, s *Proc, id string) error {
	cc, err := grpc.NewClient(s.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_, err = clusterpb.NewTabletControlClient(cc).UnloadTablet(ctx, &clusterpb.UnloadTabletRequest{TabletId: id})
	return err
}

func (n *Nemesis) move(ctx context.Context, f *Fault) error {
	var cands []struct {
		s  *Proc
		id string
	}
	for s, ts := range n.servedTablets(n.Table) {
		for _, t := range ts {
			cands = append(cands, struct {
				s  *Proc
				id string
			}{s, t.ID})
		}
	}
	if len(cands) == 0 {
		return errors.New("no served tablet of the hot table")
	}
	c := cands[n.Rand.IntN(len(cands))]
	f.Target = c.s.Name + " " + c.id
	return unload(ctx, c.s, c.id)
}

// tabletOps returns the admin extension's TabletOperations on the active
// master.
func (n *Nemesis) tabletOps(ctx context.Context, f *Fault) (adminextpb.TabletOperationsClient, func(), error) {
	m, err := n.activeMaster(ctx, f)
	if err != nil {
		return nil, nil, err
	}
	cc, err := grpc.NewClient(m.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	return adminextpb.NewTabletOperationsClient(cc), func() { cc.Close() }, nil
}

func (n *Nemesis) fullName(table string) string {
	return meta.TableID{Instance: "i", Table: table}.FullName("p")
}

// refused reports an answer that declines the operation (the tablet is
// busy, too small, shares files, has no neighbour): not a fault of the
// cluster, noted rather than counted.
func refused(err error) bool {
	switch status.Code(err) {
	case codes.FailedPrecondition, codes.InvalidArgument, codes.NotFound, codes.Aborted, codes.OutOfRange:
		return true
	}
	return false
}

// split forces a split of the tablet holding a random hot row, at a key
// just after the row when that lies inside the tablet (else a middle key).
func (n *Nemesis) split(ctx context.Context, f *Fault) error {
	ops, done, err := n.tabletOps(ctx, f)
	if err != nil {
		return err
	}
	defer done()
	row := n.Rows[n.Rand.IntN(len(n.Rows))]
	f.Target = "tablet of " + row
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	key := fmt.Sprintf("%s~%04x", row, n.Rand.IntN(1<<16))
	if list, err := ops.ListTablets(ctx, &adminextpb.ListTabletsRequest{Table: n.fullName(n.Table)}); err == nil {
		for _, t := range list.GetTablets() {
			if row >= string(t.GetStartKey()) && (len(t.GetEndKey()) == 0 || row < string(t.GetEndKey())) &&
				len(t.GetEndKey()) > 0 && key >= string(t.GetEndKey()) {
				key = "" // not inside: a middle key
			}
		}
	}
	var resp *adminextpb.SplitTabletResponse
	err = retryAdmin(ctx, f, "split", codes.OK, func(ctx context.Context) (err error) {
		resp, err = ops.SplitTablet(ctx, &adminextpb.SplitTabletRequest{Table: n.fullName(n.Table), RowKey: []byte(row), SplitKey: []byte(key)})
		return err
	})
	if refused(err) {
		f.addNote("refused: " + firstLine(err.Error(), 200))
		return nil
	}
	if err != nil {
		return err
	}
	f.addNote(fmt.Sprintf("%s split into %d at %q", resp.GetParentId(), len(resp.GetChildren()), key))
	return nil
}

// merge merges the tablet holding a random hot row with its right
// neighbour.
func (n *Nemesis) merge(ctx context.Context, f *Fault) error {
	ops, done, err := n.tabletOps(ctx, f)
	if err != nil {
		return err
	}
	defer done()
	row := n.Rows[n.Rand.IntN(len(n.Rows)-2)] // not in the last tablet: it has no right neighbour
	f.Target = "tablet of " + row
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var resp *adminextpb.MergeTabletsResponse
	err = retryAdmin(ctx, f, "merge", codes.OK, func(ctx context.Context) (err error) {
		resp, err = ops.MergeTablets(ctx, &adminextpb.MergeTabletsRequest{Table: n.fullName(n.Table), RowKey: []byte(row)})
		return err
	})
	if refused(err) {
		f.addNote("refused: " + firstLine(err.Error(), 200))
		return nil
	}
	if err != nil {
		return err
	}
	f.addNote(fmt.Sprintf("%s and %s merged into %s", resp.GetLeftId(), resp.GetRightId(), resp.GetMerged().GetTabletId()))
	return nil
}

// compact runs a major compaction of the tablet of every other hot row.
func (n *Nemesis) compact(ctx context.Context, f *Fault) error {
	ops, done, err := n.tabletOps(ctx, f)
	if err != nil {
		return err
	}
	defer done()
	f.Target = "hot tablets"
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var notes []string
	for i := 0; i < len(n.Rows); i += 2 {
		// A tablet moving or recovering answers UNAVAILABLE for a moment.
		var resp *adminextpb.CompactTabletResponse
		err := retryAdmin(ctx, f, "compact", codes.OK, func(ctx context.Context) (err error) {
			resp, err = ops.CompactTablet(ctx, &adminextpb.CompactTabletRequest{Table: n.fullName(n.Table), RowKey: []byte(n.Rows[i]), Major: true})
			return err
		})
		switch {
		case refused(err):
			notes = append(notes, "refused: "+firstLine(err.Error(), 120))
		case err != nil:
			return err
		default:
			notes = append(notes, resp.GetTabletId())
		}
	}
	f.addNote("major: " + strings.Join(notes, ", "))
	return nil
}

func (n *Nemesis) schema(ctx context.Context, f *Fault) error {
	n.schemaN++
	fam := fmt.Sprintf("x%d", n.schemaN)
	f.Target = fam
	if _, err := n.activeMaster(ctx, f); err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	create := func(ctx context.Context) error { return n.Admin.CreateColumnFamily(ctx, n.Table, fam) }
	if err := retryAdmin(sctx, f, "create family", codes.AlreadyExists, create); err != nil {
		return fmt.Errorf("create family %s: %w", fam, err)
	}
	policy := func(ctx context.Context) error {
		return n.Admin.SetGCPolicy(ctx, n.Table, fam, bigtable.MaxVersionsPolicy(2))
	}
	if err := retryAdmin(sctx, f, "gc policy", codes.OK, policy); err != nil {
		return fmt.Errorf("gc policy of %s: %w", fam, err)
	}
	n.hold(ctx, time.Second, 2*time.Second)
	drop := func(ctx context.Context) error { return n.Admin.DeleteColumnFamily(ctx, n.Table, fam) }
	if err := retryAdmin(sctx, f, "delete family", codes.NotFound, drop); err != nil {
		return fmt.Errorf("delete family %s: %w", fam, err)
	}
	return nil
}

// retryAdmin runs an admin call until it succeeds or fails with something
// other than UNAVAILABLE (the tablet server forwarding admin calls may not
// know the new master yet, some seconds after a takeover), noting the
// retries in f. done is the code that means an earlier attempt of the
// call, whose answer was lost, already did it (ALREADY_EXISTS for a
// creation, NOT_FOUND for a deletion); codes.OK for none.
func retryAdmin(ctx context.Context, f *Fault, what string, done codes.Code, call func(context.Context) error) error {
	for attempt := 1; ; attempt++ {
		err := call(ctx)
		switch c := status.Code(err); {
		case err == nil:
			return nil
		case attempt > 1 && done != codes.OK && c == done:
			return nil
		case c != codes.Unavailable || ctx.Err() != nil:
			return err
		}
		if attempt == 1 {
			f.addNote(fmt.Sprintf("%s retried after %v", what, err))
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// VictimRows is the number of rows of the corruption's victim table.
const VictimRows = 200

func victimValue(i int) []byte {
	return []byte(fmt.Sprintf("victim-%04d-%s", i, strings.Repeat("v", 200)))
}

// LoadVictim writes the victim table's rows.
func (n *Nemesis) LoadVictim(ctx context.Context) error {
	tbl := n.Data.Open(n.Victim)
	var keys []string
	var muts []*bigtable.Mutation
	for i := range VictimRows {
		m := bigtable.NewMutation()
		m.Set(Family, "x", bigtable.Timestamp(1000), victimValue(i))
		keys = append(keys, fmt.Sprintf("r%04d", i))
		muts = append(muts, m)
	}
	errs, err := tbl.ApplyBulk(ctx, keys, muts)
	if err != nil {
		return err
	}
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// scanVictim reads the victim table and checks every value it returns;
// it returns the rows read and the error that ended the scan.
func (n *Nemesis) scanVictim(ctx context.Context) (int, error) {
	tbl := n.Data.Open(n.Victim)
	rows := 0
	var bad error
	err := tbl.ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		var i int
		if _, err := fmt.Sscanf(r.Key(), "r%04d", &i); err != nil || len(r[Family]) != 1 || !bytes.Equal(r[Family][0].Value, victimValue(i)) {
			bad = fmt.Errorf("row %q served wrong data", r.Key())
			return false
		}
		rows++
		return true
	})
	if bad != nil {
		return rows, bad
	}
	return rows, err
}

func (n *Nemesis) minio() (*minio.Client, string, error) {
	mc, err := minio.New(n.C.MinIO.Addr, &minio.Options{Creds: credentials.NewStaticV4(n.C.minioUser, n.C.minioPass, ""), Secure: false})
	return mc, "tabula-" + n.C.Name, err
}

// corrupt flushes the victim table to SSTables (unloading its tablets),
// damages bytes in the middle of its SSTable objects, makes the tablet
// open again, and reads: the read must fail with an error naming one of
// the objects, and never return wrong data. The objects are then restored
// and the table must read whole again. Every object under the table's
// directory is damaged, not one picked: the directory may also hold files
// no tablet references (a flush that took longer than the commit window
// rewrote its file under a new name, and GC has not collected the old one
// yet), and damage to one of those is rightly never read.
func (n *Nemesis) corrupt(ctx context.Context, f *Fault) error {
	for s, ts := range n.servedTablets(n.Victim) {
		for _, t := range ts {
			if err := unload(ctx, s, t.ID); err != nil {
				return fmt.Errorf("unload %s: %w", t.ID, err)
			}
		}
	}
	mc, bucket, err := n.minio()
	if err != nil {
		return err
	}
	prefix := meta.TableDirPrefix + "i/" + n.Victim + "/"
	var objs []string
	for o := range mc.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			return o.Err
		}
		if strings.HasSuffix(o.Key, ".sst") {
			objs = append(objs, o.Key)
		}
	}
	if len(objs) == 0 {
		return fmt.Errorf("no SSTable under %s", prefix)
	}
	f.Target = strings.Join(objs, ", ")
	origs := map[string][]byte{}
	put := func(key string, b []byte) error {
		_, err := mc.PutObject(ctx, bucket, key, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{})
		return err
	}
	restore := func() error {
		var errs []error
		for key, orig := range origs {
			errs = append(errs, put(key, orig))
		}
		return errors.Join(errs...)
	}
	restored := false
	defer func() {
		if !restored {
			_ = restore()
		}
	}()
	for _, key := range objs {
		obj, err := mc.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
		if err != nil {
			return err
		}
		orig, err := io.ReadAll(obj)
		obj.Close()
		if err != nil {
			return err
		}
		bad := bytes.Clone(orig)
		for i := len(bad) / 4; i < len(bad)/4+64 && i < len(bad); i++ {
			bad[i] ^= 0x5a
		}
		origs[key] = orig
		if err := put(key, bad); err != nil {
			return err
		}
	}
	// Reopen: the damaged bytes must be read from the store.
	for s, ts := range n.servedTablets(n.Victim) {
		for _, t := range ts {
			_ = unload(ctx, s, t.ID)
		}
	}
	var rows int
	var rerr error
	deadline := time.Now().Add(30 * time.Second)
	namesOne := func(err error) bool {
		for _, key := range objs {
			if strings.Contains(err.Error(), key[strings.LastIndex(key, "/")+1:]) {
				return true
			}
		}
		return false
	}
	for time.Now().Before(deadline) {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		rows, rerr = n.scanVictim(rctx)
		cancel()
		if rerr != nil && strings.Contains(rerr.Error(), "served wrong data") {
			return fmt.Errorf("corrupted SSTables %s: %v", f.Target, rerr)
		}
		if rerr != nil && namesOne(rerr) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	switch {
	case rerr == nil:
		return fmt.Errorf("corrupted SSTables %s: a full scan succeeded (%d rows): the damage went unnoticed", f.Target, rows)
	case !namesOne(rerr):
		return fmt.Errorf("corrupted SSTables %s: the read failed without naming an object: %v", f.Target, rerr)
	}
	f.addNote(fmt.Sprintf("detected after %d good rows: %s", rows, firstLine(rerr.Error(), 300)))
	if err := restore(); err != nil {
		return err
	}
	restored = true
	for s, ts := range n.servedTablets(n.Victim) {
		for _, t := range ts {
			_ = unload(ctx, s, t.ID)
		}
	}
	deadline = time.Now().Add(60 * time.Second)
	for {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		rows, rerr = n.scanVictim(rctx)
		cancel()
		if rerr == nil && rows == VictimRows {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after restoring %s: %d rows, %v", f.Target, rows, rerr)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func firstLine(s string, n int) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}
