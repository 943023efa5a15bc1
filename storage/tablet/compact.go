package tablet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/memtable"
	"github.com/tabuladb/tabula/storage/sstable"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// Flush runs a minor compaction: the memtable is frozen, written as one
// SSTable per locality group, the new state (files, redo point) is saved,
// and the files replace the frozen memtable. Writes go on into a fresh
// memtable meanwhile.
func (t *Tablet) Flush(ctx context.Context) error {
	t.lockMaint()
	defer t.unlockMaint()
	if err := t.checkOpen(); err != nil {
		return err
	}
	return t.flushAllLocked(ctx)
}

// FlushForHandoff is Flush for a tablet about to stop serving — to be
// unloaded (Close next) or split: it flushes, then flushes again what
// arrived meanwhile while that is handoffSmallBytes or more and the
// flushes catch up with the writes (at most handoffMaxFlushes flushes in
// all), so that the flush made once the
// tablet has stopped serving (at Close, or inside the split) holds
// little. That last flush is the time the tablet's rows are unserved:
// under a steady stream of writes into a cluster's object store, a
// single flush beforehand left the 21 MB that arrived during it to be
// flushed unserved, 150 ms. The paper's unload (§5.2) makes the same two
// minor compactions and calls the second "usually very fast"; under load
// it is fast only once the first ones have caught up.
func (t *Tablet) FlushForHandoff(ctx context.Context) error {
	t.lockMaint()
	defer t.unlockMaint()
	if err := t.checkOpen(); err != nil {
		return err
	}
	return t.flushForHandoffLocked(ctx)
}

// handoffSmallBytes is the active memtable's size under which
// FlushForHandoff stops flushing: what is left is flushed unserved, in a
// few milliseconds even into an object store.
const handoffSmallBytes = 1 << 20

// handoffMaxFlushes bounds FlushForHandoff's flushes. Each one catches
// up with the writes that came during the one before, so the memtable
// shrinks as long as flushes outrun the writes (under a bulk load into
// MinIO, by about a third each time).
const handoffMaxFlushes = 8

// flushForHandoffLocked is FlushForHandoff under maintMu.
func (t *Tablet) flushForHandoffLocked(ctx context.Context) error {
	if err := t.flushAllLocked(ctx); err != nil {
		return err
	}
	flushed := int64(math.MaxInt64)
	for range handoffMaxFlushes - 1 {
		active, _ := t.MemtableBytes()
		if handoffDone(active, flushed) {
			return nil
		}
		if _, err := t.flushLocked(ctx); err != nil {
			return err
		}
		flushed = active
	}
	return nil
}

// handoffDone reports whether FlushForHandoff stops flushing with active
// bytes in the memtable, its last flush (after the first, MaxInt64 if
// none) having written flushed: once what is left is small — or once
// the flushes no longer catch up (what came during the last one is more
// than three quarters of what it flushed: the writers outrun the store),
// when another would leave little less and add a small file.
func handoffDone(active, flushed int64) bool {
	return active < handoffSmallBytes || active > flushed/4*3
}

// ReleaseLog makes the tablet need no commit-log record before the log's
// current tail, so that the log can be truncated past it: a tablet with
// writes in memory is flushed (as Flush); an idle one — its memtable empty
// — only has its redo point moved to the tail and its state saved, since
// all its writes are in SSTables already. Without a log it does nothing.
//
// A tablet that takes few writes fills its memtable slowly, and until it
// flushes its redo point holds every later segment of the server's log,
// which all the server's tablets share: the server calls ReleaseLog for
// such tablets (Host.TruncateLog), as HBase flushes the regions holding
// its oldest write-ahead logs.
func (t *Tablet) ReleaseLog(ctx context.Context) error {
	if t.opts.Log == nil {
		return nil
	}
	t.lockMaint()
	defer t.unlockMaint()
	if err := t.checkOpen(); err != nil {
		return err
	}
	// Under writeMu a write is both logged and in the memtable, or
	// neither: with the memtable empty, every record before the tail
	// is in SSTables, and every later write lands after the tail.
	t.writeMu.Lock()
	idle := t.mem.Len() == 0 && t.frozen == nil
	tail := t.opts.Log.Tail()
	t.writeMu.Unlock()
	if !idle {
		return t.flushAllLocked(ctx)
	}
	if tail.Compare(t.state.RedoPoint) <= 0 {
		return nil
	}
	st := t.state.Clone()
	st.RedoPoint = tail
	if err := t.opts.StateStore.Save(ctx, st); err != nil {
		return fmt.Errorf("tablet %s: saving state: %w", t.id, err)
	}
	t.setState(st)
	return nil
}

// flushAllLocked is Flush under maintMu.
func (t *Tablet) flushAllLocked(ctx context.Context) error {
	// A memtable left frozen by a flush that failed is flushed alone by
	// flushLocked: then the active one too, so that every write
	// acknowledged before the call is in SSTables (a backup's point).
	t.writeMu.Lock()
	leftover := t.frozen != nil
	t.writeMu.Unlock()
	_, err := t.flushLocked(ctx)
	if err == nil && leftover {
		_, err = t.flushLocked(ctx)
	}
	return err
}

func (t *Tablet) checkOpen() error {
	if t.closed.Load() {
		return t.notServing(nil, "closed")
	}
	if fe := t.failed.Load(); fe != nil {
		return fe
	}
	return nil
}

// flushLocked flushes the frozen memtable, freezing the active one first
// if nothing is frozen. It returns the cut: every entry with a sequence
// number at or below it is in SSTables afterwards. Called under flushMu
// (and maintMu too, except by the flusher).
func (t *Tablet) flushLocked(ctx context.Context) (uint64, error) {
	t.writeMu.Lock()
	if t.frozen == nil {
		if t.mem.Len() == 0 {
			cut := t.lastSeq
			t.writeMu.Unlock()
			return cut, nil
		}
		t.freezeLocked()
	}
	fz := t.frozen
	t.writeMu.Unlock()

	// Flush only durable entries: wait for the last record of the frozen
	// memtable (all earlier ones are durable with it), then publish, so
	// that no file ever holds an entry a reader may not see.
	if fz.commit != nil {
		if err := fz.commit.Wait(ctx); err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return 0, err
			}
			return 0, t.fail(err)
		}
	}
	if fe := t.failed.Load(); fe != nil {
		return 0, fe
	}
	t.publish(fz.seq)

	v, _, err := t.acquire()
	if err != nil {
		return 0, err
	}
	defer v.unref()
	groups := slices.Sorted(maps.Keys(v.schema.Groups()))
	for g := range v.groups {
		if !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	var written map[string]*tableFile
	abort := func() {
		for _, f := range written {
			f.unref()
		}
	}
	for attempt := 1; ; attempt++ {
		written = make(map[string]*tableFile)
		if err := t.writeFrozenGroups(ctx, v, fz, groups, written); err != nil {
			abort()
			return 0, err
		}
		err := t.checkCommitWindow(attempt, written)
		if err == nil {
			break
		}
		abort()
		if !errors.Is(err, errSlowWrite) {
			return 0, err
		}
	}

	// A merge may run beside this flush (flusher): the state and the
	// version to install are both taken afresh under stateMu. A flush's
	// files are newer than every other file: they go first.
	t.stateMu.Lock()
	defer t.stateMu.Unlock()
	st := t.state.Clone()
	for g, f := range written {
		st.Groups[g] = append([]tabletdesc.FileMeta{f.meta}, st.Groups[g]...)
	}
	st.RedoPoint = fz.redo
	st.FlushedSeq = fz.seq
	st.LastSeq = max(st.LastSeq, fz.seq)
	if err := t.opts.StateStore.Save(ctx, st); err != nil {
		abort()
		return 0, fmt.Errorf("tablet %s: minor compaction: saving state: %w", t.id, err)
	}
	t.putState(st)

	t.writeMu.Lock()
	t.mu.Lock()
	t.frozen = nil
	if t.cur != nil {
		ng := maps.Clone(t.cur.groups)
		for g, f := range written {
			files := []*tableFile{f}
			if old := ng[g]; old != nil {
				files = append(files, old.files...)
			}
			ng[g] = &groupFiles{files: files, gen: t.newGen()}
		}
		t.install(newVersion(t.mem, nil, ng, t.cur.schema, t.cur.drops))
	}
	t.mu.Unlock()
	t.writeMu.Unlock()
	abort() // the versions hold their own references
	t.flushes.Add(1)
	return fz.seq, nil
}

// freezeLocked makes the active memtable the frozen one and starts a new
// active memtable. Called under writeMu, with nothing frozen.
func (t *Tablet) freezeLocked() {
	fz := &frozenMem{mem: t.mem, seq: t.lastSeq, commit: t.lastCommit}
	if t.opts.Log != nil {
		fz.redo = t.opts.Log.Tail()
	}
	t.frozen = fz
	t.mem = memtable.New()
	t.lastCommit = nil
	t.mu.Lock()
	if t.cur != nil {
		t.install(newVersion(t.mem, fz.mem, t.cur.groups, t.cur.schema, t.cur.drops))
	}
	t.mu.Unlock()
}

// writeFrozenGroups writes the frozen memtable fz as one SSTable per
// locality group of groups (none for a group without entries) into
// written; on an error the caller unrefs what written holds.
func (t *Tablet) writeFrozenGroups(ctx context.Context, v *version, fz *frozenMem, groups []string, written map[string]*tableFile) error {
	// The flush collects (flushcollect.go): markers in the newer, active
	// memtable keep their rows whole. It counts as begun before it lists
	// them: a marker written after the listing finds the count raised
	// (the model test's bookkeeping of versions a delete uncovers).
	t.flushesCollecting.Add(1)
	marked, err := rowsWithMarkers(v.mem)
	if err != nil {
		return fmt.Errorf("tablet %s: minor compaction: %w", t.id, err)
	}
	for _, g := range groups {
		fc := flushCollector{families: v.schema.Families, drops: v.drops, marked: marked, now: t.opts.Clock()}
		f, err := t.writeGroupFile(ctx, v.schema, g, true, func(emit func(k, val []byte) error) error {
			it := fz.mem.NewIterator()
			family := "" // the last entry's: decoding reuses the string
			for ok := it.First(); ok; ok = it.Next() {
				key := it.Key()
				var k cell.Key
				var err error
				if cell.KindOf(key) != cell.KindRowDelete {
					if k, err = cell.DecodeKeyWithFamily(key, family); err != nil {
						return err
					}
					family = k.Family
					// A family no longer in the schema: its cells are
					// shadowed by its drop.
					if fg, ok := v.schema.GroupOf(k.Family); !ok || fg != g {
						continue
					}
				} else if k, err = cell.DecodeKey(key); err != nil {
					return err
				}
				if fc.skip(k) {
					continue
				}
				if err := emit(key, it.Value()); err != nil {
					return err
				}
			}
			return nil
		})
		t.flushCollected.Add(uint64(fc.collected))
		if err != nil {
			return fmt.Errorf("tablet %s: minor compaction: %w", t.id, err)
		}
		if f != nil {
			written[g] = f
		}
	}
	return nil
}

// paceChunk is how many bytes of entries a paced file write hands to the
// Pacer at a time: small enough that a paced write yields within a few
// milliseconds, large enough that pacing costs nothing measurable.
const paceChunk = 256 << 10

type pacingKey struct{}

// withPacing marks ctx as background work's: the files written under it
// are paced by Options.Pacer, at the pressure that pressure reports.
func withPacing(ctx context.Context, pressure func() float64) context.Context {
	return context.WithValue(ctx, pacingKey{}, pressure)
}

// pacedBy returns the pressure function of a paced ctx, nil if unpaced.
func pacedBy(ctx context.Context) func() float64 {
	pressure, _ := ctx.Value(pacingKey{}).(func() float64)
	return pressure
}

// commitAttempts bounds how often a flush or compaction writes its files
// again because writing them took longer than Options.FileCommitWindow.
const commitAttempts = 4

// errSlowWrite: a new SSTable is older than the commit window (see
// Options.FileCommitWindow); it must be written again under a fresh name.
var errSlowWrite = errors.New("writing an SSTable took longer than the commit window")

// checkCommitWindow returns errSlowWrite (wrapped) if a file of files is
// older than the commit window — at the last of commitAttempts, an error
// that is not errSlowWrite, so that the caller gives up.
func (t *Tablet) checkCommitWindow(attempt int, files map[string]*tableFile) error {
	if t.opts.FileCommitWindow <= 0 {
		return nil
	}
	for _, f := range files {
		created, ok := FileCreated(f.meta.Name)
		if !ok {
			continue
		}
		if age := time.Since(created); age >= t.opts.FileCommitWindow {
			if attempt >= commitAttempts {
				return fmt.Errorf("tablet %s: %d attempts, the last SSTable %s %v old (window %v): %s", t.id, attempt, f.meta.Name, age.Round(time.Millisecond), t.opts.FileCommitWindow, errSlowWrite.Error())
			}
			t.opts.Logger.Warn("SSTable written more slowly than the commit window: writing it again under a fresh name, so no sweep can have taken it", "tablet", t.id, "file", f.meta.Name, "age", age.String(), "window", t.opts.FileCommitWindow.String(), "attempt", attempt)
			return fmt.Errorf("tablet %s: %s %v old: %w", t.id, f.meta.Name, age, errSlowWrite)
		}
	}
	return nil
}

// writeGroupFile writes the entries src emits as a new SSTable of group g
// and opens it. It returns nil (and writes nothing) when src emits nothing.
// Consecutive duplicate keys are written once.
//
// With cacheBlocks (a memtable's flush), the file's data blocks go into the
// block cache as they were written: the rows just written are the likeliest
// to be read next, and without it their first reads would read the file
// back (from the page cache, or the object store in a cluster) — as
// HBase's cache-on-write and RocksDB's prepopulated block cache do for
// flushes. Merges do not: their output is mostly older data.
func (t *Tablet) writeGroupFile(ctx context.Context, schema tabletdesc.Schema, g string, cacheBlocks bool, src func(emit func(k, v []byte) error) error) (*tableFile, error) {
	lg := schema.Group(g)
	name := newFileName(t.opts.Dir, time.Now())
	bw, err := t.opts.Store.Create(ctx, name)
	if err != nil {
		return nil, err
	}
	var retain int64
	if cacheBlocks = cacheBlocks && t.opts.Cache != nil && !lg.InMemory; cacheBlocks {
		// At most a quarter of the cache: the copies wait in memory
		// until the file is open, and a flush far larger than the
		// cache would only push out blocks that reads keep hot.
		retain = t.opts.Cache.Capacity() / 4
	}
	sw := sstable.NewWriter(bw, sstable.WriterOptions{BlockSize: lg.BlockSize, Compression: sstableCompression(lg.Compression), LocalityGroup: g, RetainBytes: retain})
	var last []byte
	n := 0
	pressure, unpaid := pacedBy(ctx), 0
	paced := pressure != nil && t.opts.Pacer != nil
	if w := t.opts.FileCommitWindow; paced && w > 0 {
		// Pacing must never make the file miss its commit window
		// (written again, at last failing): it runs unpaced from half
		// the window on.
		started, base := time.Now(), pressure
		pressure = func() float64 {
			return max(base(), float64(time.Since(started))/float64(w/2))
		}
	}
	err = src(func(k, v []byte) error {
		if last != nil && bytes.Equal(k, last) {
			return nil
		}
		last = append(last[:0], k...)
		n++
		if paced {
			if unpaid += len(k) + len(v); unpaid >= paceChunk {
				if err := t.opts.Pacer.Pace(ctx, unpaid, pressure); err != nil {
					return err
				}
				unpaid = 0
			}
		}
		return sw.Add(k, v)
	})
	if err == nil && paced {
		err = t.opts.Pacer.Pace(ctx, unpaid, pressure)
	}
	if err != nil || n == 0 {
		_ = bw.Abort()
		return nil, err
	}
	props, err := sw.Finish()
	if err != nil {
		_ = bw.Abort()
		return nil, err
	}
	if err := bw.Close(); err != nil {
		return nil, err
	}
	meta := tabletdesc.FileMeta{Name: name, Size: props.FileSize, SmallestKey: props.SmallestKey, LargestKey: props.LargestKey, MaxSeq: props.MaxSeq, Entries: props.NumEntries}
	f, err := openTableFile(ctx, t.opts.Store, meta, sstable.ReaderOptions{Cache: t.opts.Cache, InMemory: lg.InMemory})
	if err != nil {
		return nil, err
	}
	if cacheBlocks {
		f.r.Prime(sw.RetainedBlocks())
	}
	return f, nil
}

// Compact runs a compaction now. A merging compaction (major false) merges
// the SSTables of every group that has several into one, keeping delete
// markers and every version. A major compaction first flushes the memtable,
// then rewrites all SSTables of every group into one, dropping delete
// markers, everything they shadow, older writes of the same version, what
// the GC policies collect at this time, and cells of families no longer in
// the schema.
func (t *Tablet) Compact(ctx context.Context, major bool) error {
	t.lockMaint()
	defer t.unlockMaint()
	if err := t.checkOpen(); err != nil {
		return err
	}
	if !major {
		for _, g := range t.groupNames() {
			if n := t.groupLen(g); n > 1 {
				if err := t.mergeLocked(ctx, g, n); err != nil {
					return err
				}
			}
		}
		return nil
	}
	cut, err := t.flushLocked(ctx)
	if err != nil {
		return err
	}
	for _, g := range t.groupNames() {
		if err := t.majorLocked(ctx, g); err != nil {
			return err
		}
	}
	// Every entry below cut was in the compacted files: drops at or
	// below it have nothing left to shadow.
	t.mu.RLock()
	drops := maps.Clone(t.cur.drops)
	t.mu.RUnlock()
	changed := false
	for f, seq := range drops {
		if seq <= cut {
			delete(drops, f)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	st := t.state.Clone()
	st.Drops = maps.Clone(drops)
	if err := t.opts.StateStore.Save(ctx, st); err != nil {
		return err
	}
	t.setState(st)
	t.writeMu.Lock()
	t.mu.Lock()
	cur := t.cur
	// A drop made after the cut (by SetSchema meanwhile) stays.
	for f, seq := range cur.drops {
		if seq > cut {
			drops[f] = seq
		}
	}
	t.install(newVersion(cur.mem, cur.frozen, cur.groups, cur.schema, drops))
	t.mu.Unlock()
	t.writeMu.Unlock()
	return nil
}

func (t *Tablet) groupNames() []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.cur == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(t.cur.groups))
}

func (t *Tablet) groupLen(g string) int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.cur == nil || t.cur.groups[g] == nil {
		return 0
	}
	return len(t.cur.groups[g].files)
}

// pickMergeCount chooses how many of a group's newest SSTables a merging
// compaction merges: enough to bring the group to MaxSSTables/2, and then
// more while the next older file is no bigger than the merged ones together
// (size-tiered), so that big old files are rewritten rarely.
func (t *Tablet) pickMergeCount(g string) int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	files := t.cur.groups[g].files
	k := max(2, len(files)-t.opts.MaxSSTables/2+1)
	k = min(k, len(files))
	var sum int64
	for _, f := range files[:k] {
		sum += f.meta.Size
	}
	for k < len(files) && files[k].meta.Size <= sum {
		sum += files[k].meta.Size
		k++
	}
	return k
}

// mergeLocked merges the k newest SSTables of group g into one, clipped to
// the tablet's range, keeping every entry. Called under maintMu.
func (t *Tablet) mergeLocked(ctx context.Context, g string, k int) error {
	return t.rewriteLocked(ctx, g, k, rewriteMerge)
}

// majorLocked rewrites all of group g's SSTables into one (or none), as
// Compact(major) describes. Called under maintMu.
func (t *Tablet) majorLocked(ctx context.Context, g string) error {
	return t.rewriteLocked(ctx, g, math.MaxInt, rewriteMajor)
}

// autoMergeLocked is the background's merging compaction of the k newest
// SSTables of group g, and it collects. When the k are all the group's
// files it is resolved as a major compaction is (delete markers, what they
// shadow and what the GC policies collect dropped), without first flushing
// the memtable: with every file in the merge, no older entry is left out
// that a dropped marker would have to go on shadowing, and the memtable
// holds only newer writes, which shadow what they shadow whatever the
// files hold. Otherwise it is resolved as a partial merge (resolveKeep):
// the markers stay, for the older files, and only what they shadow in
// the k files and what the GC policies collect among the k files'
// versions go. Versions the GC policies collect are gone from then on, even
// if the versions above them are deleted later — Bigtable's garbage
// collection, too, runs when it runs. Without it a table whose rows are
// rewritten keeps every old version until a merge happens to take all the
// files, and every merge copies them all again. Called under maintMu.
func (t *Tablet) autoMergeLocked(ctx context.Context, g string, k int) error {
	return t.rewriteLocked(ctx, g, k, rewriteCollect)
}

// rewriteMode says how rewriteLocked resolves the files it merges.
type rewriteMode int

const (
	rewriteMerge   rewriteMode = iota // keep every entry
	rewriteMajor                      // resolve as Compact(major) does
	rewriteCollect                    // major if the files are all the group's, else resolveKeep
)

// resolution is how rewriteFiles writes the entries it merges.
type resolution int

const (
	keepAll     resolution = iota // every entry, as it is
	resolveAll                    // the live versions only (a major compaction)
	resolveKeep                   // the live versions and every delete marker (a partial merge)
)

// rewriteFiles writes inputs (the newest files of group g) merged into
// one new SSTable, resolved as res says; nil when nothing is left.
//
// resolveKeep may drop, of the inputs' entries, what a read could not
// return whatever the older files hold: entries shadowed by a marker among
// the inputs (a marker shadows only older writes, and the older files hold
// only older writes), older writes of a version (the newest write of a
// timestamp hides them; an aggregate family's are folded into it, and a
// read folds that with the older files' writes), and the versions the GC
// policies collect counting only the inputs' versions (a policy that
// collects the i-th newest version collects it at any greater rank, which
// is all the older files' versions can give it). The markers stay: they
// still shadow the older files' entries.
func (t *Tablet) rewriteFiles(ctx context.Context, v *version, g string, inputs []*tableFile, res resolution) (*tableFile, error) {
	srcs := make([]cell.Iterator, len(inputs))
	for i, f := range inputs {
		srcs[i] = f.r.NewIterator()
	}
	it := newMergingIter(t.lower, t.upper, srcs...)
	var out *tableFile
	var err error
	switch res {
	case keepAll:
		out, err = t.writeGroupFile(ctx, v.schema, g, false, func(emit func(k, v []byte) error) error {
			for ok := it.First(); ok; ok = it.Next() {
				if err := emit(it.Key(), it.Value()); err != nil {
					return err
				}
			}
			return it.Error()
		})
	default:
		p := resolveParams{snap: math.MaxUint64, families: v.schema.Families, drops: v.drops, now: t.opts.Clock()}
		var markedRows map[string]bool
		if markedRows, err = rowsWithMarkers(v.mem, v.frozen); err != nil {
			break
		}
		out, err = t.writeGroupFile(ctx, v.schema, g, false, func(emit func(k, v []byte) error) error {
			var es []entry
			var rs resolver
			ok := it.First()
			for ok {
				if err := ctx.Err(); err != nil {
					return err
				}
				es, ok = readRowEntries(it, es[:0])
				p.noGC = false
				if len(markedRows) > 0 {
					k, err := cell.DecodeKey(es[0].key)
					if err != nil {
						return err
					}
					p.noGC = markedRows[string(k.Row)]
				}
				vs, err := rs.resolve(es, p)
				if err != nil {
					return err
				}
				if res == resolveAll {
					for _, cv := range vs {
						if err := emit(cv.raw.key, cv.raw.value); err != nil {
							return err
						}
					}
					continue
				}
				// The live versions come in the order of their
				// entries in es: walk both, keeping the markers.
				j := 0
				for _, e := range es {
					switch {
					case cell.KindOf(e.key) != cell.KindSet:
						err = emit(e.key, e.value)
					case j < len(vs) && bytes.Equal(e.key, vs[j].raw.key):
						err = emit(e.key, vs[j].raw.value) // folded, in an aggregate family
						j++
					}
					if err != nil {
						return err
					}
				}
			}
			return it.Error()
		})
	}
	if cerr := it.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		if out != nil {
			out.unref()
		}
		return nil, fmt.Errorf("tablet %s: compaction of group %s: %w", t.id, g, err)
	}
	return out, nil
}

// rowsWithMarkers returns the rows with a delete marker in mems (nil ones
// skipped): the memtables newer than what a rewrite or a flush collects
// in. A rewrite that collects does not read the memtables, and a
// marker there, written before, may delete versions above one that the
// rewrite would take for collectable — a version that is in fact live, the
// newest left of its column: the rewrite applies no GC policy to those
// rows (it still drops what its own files' markers shadow). A marker
// written after the rewrite has read the memtables finds the version
// collected, as it would after any earlier GC.
func rowsWithMarkers(mems ...*memtable.Memtable) (map[string]bool, error) {
	var rows map[string]bool
	for _, m := range mems {
		if m == nil {
			continue
		}
		it := m.NewIterator()
		for ok := it.First(); ok; ok = it.Next() {
			if cell.KindOf(it.Key()) == cell.KindSet {
				continue
			}
			k, err := cell.DecodeKey(it.Key())
			if err != nil {
				return nil, err
			}
			if rows == nil {
				rows = map[string]bool{}
			}
			rows[string(k.Row)] = true
		}
		if err := it.Close(); err != nil {
			return nil, err
		}
	}
	return rows, nil
}

func (t *Tablet) rewriteLocked(ctx context.Context, g string, k int, mode rewriteMode) error {
	v, _, err := t.acquire()
	if err != nil {
		return err
	}
	defer v.unref()
	gf := v.groups[g]
	if gf == nil {
		return nil
	}
	k = min(k, len(gf.files))
	major := mode == rewriteMajor
	if k == 0 || (!major && k < 2) {
		return nil
	}
	// The output drops what a major compaction drops when every file is
	// an input. The compaction is counted as the kind it was asked for.
	res := keepAll
	switch {
	case major || (mode == rewriteCollect && k == len(gf.files)):
		res = resolveAll
	case mode == rewriteCollect:
		res = resolveKeep
	}
	if mode == rewriteCollect {
		t.collectingBegun.Add(1)
	}
	inputs := gf.files[:k]
	var out *tableFile
	for attempt := 1; ; attempt++ {
		if out, err = t.rewriteFiles(ctx, v, g, inputs, res); err != nil {
			return err
		}
		if out == nil {
			break
		}
		err := t.checkCommitWindow(attempt, map[string]*tableFile{g: out})
		if err == nil {
			break
		}
		out.unref()
		if !errors.Is(err, errSlowWrite) {
			return err
		}
	}

	// A flush may have run beside this merge (the flusher holds only
	// flushMu) and put newer files before the inputs: they are replaced
	// where they are now, in the state and the version both, taken
	// afresh under stateMu.
	t.stateMu.Lock()
	st := t.state.Clone()
	at := slices.IndexFunc(st.Groups[g], func(m tabletdesc.FileMeta) bool { return m.Name == inputs[0].meta.Name })
	inState := at >= 0 && at+k <= len(st.Groups[g]) && slices.EqualFunc(st.Groups[g][at:at+k], inputs, func(m tabletdesc.FileMeta, f *tableFile) bool { return m.Name == f.meta.Name })
	// The version's files are the state's, in the same order; only this
	// merge (maintMu) and a flush (stateMu) change them.
	t.mu.RLock()
	inVersion := t.cur == nil || (t.cur.groups[g] != nil && at+k <= len(t.cur.groups[g].files) && slices.Equal(t.cur.groups[g].files[max(at, 0):max(at, 0)+k], inputs))
	t.mu.RUnlock()
	if !inState || !inVersion {
		t.stateMu.Unlock()
		if out != nil {
			out.unref()
		}
		return fmt.Errorf("tablet %s: compaction: its input files changed in the state meanwhile", t.id)
	}
	var metas []tabletdesc.FileMeta
	metas = append(metas, st.Groups[g][:at]...)
	if out != nil {
		metas = append(metas, out.meta)
	}
	metas = append(metas, st.Groups[g][at+k:]...)
	if len(metas) == 0 {
		delete(st.Groups, g)
	} else {
		st.Groups[g] = metas
	}
	if err := t.opts.StateStore.Save(ctx, st); err != nil {
		t.stateMu.Unlock()
		if out != nil {
			out.unref()
		}
		return fmt.Errorf("tablet %s: compaction: saving state: %w", t.id, err)
	}
	t.putState(st)

	t.mu.Lock()
	cur := t.cur
	if cur != nil {
		ng := maps.Clone(cur.groups)
		var old []*tableFile
		if gf := cur.groups[g]; gf != nil {
			old = gf.files
		}
		// Where the state has them: the version holds the state's files.
		files := slices.Clone(old[:at])
		if out != nil {
			files = append(files, out)
		}
		files = append(files, old[at+k:]...)
		if len(files) == 0 {
			delete(ng, g)
		} else {
			ng[g] = &groupFiles{files: files, gen: t.newGen()}
		}
		t.install(newVersion(cur.mem, cur.frozen, ng, cur.schema, cur.drops))
	}
	t.mu.Unlock()
	t.stateMu.Unlock()
	if out != nil {
		out.unref()
	}
	if major {
		t.majors.Add(1)
	} else {
		t.merges.Add(1)
		if res != keepAll {
			t.collectingMerges.Add(1)
		}
	}
	return nil
}

// sstableCompression maps a locality group's codec to the SSTable format's.
// An unknown value is passed on as it is, for the writer to refuse.
func sstableCompression(c tabletdesc.Compression) sstable.Compression {
	switch c {
	case tabletdesc.NoCompression:
		return sstable.NoCompression
	case tabletdesc.SnappyCompression:
		return sstable.SnappyCompression
	case tabletdesc.ZstdCompression:
		return sstable.ZstdCompression
	}
	return sstable.Compression(c)
}
