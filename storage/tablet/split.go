package tablet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/memtable"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// KeySample is one point of SampleKeys.
type KeySample struct {
	Row []byte
	// Offset is about how many bytes the tablet stores in rows up to and
	// including Row.
	Offset int64
}

// memSampleBytes is the spacing of samples taken from memtables.
const memSampleBytes = 64 << 10

// SampleKeys returns row keys of the tablet at roughly even byte offsets,
// ascending: the last key of every SSTable data block in range (from the
// indexes loaded in memory) and a key about every 64 KiB of the memtables
// (memtable.Memtable.Sample: the offsets there are estimates). It
// serves SampleRowKeys and the choice of split keys.
func (t *Tablet) SampleKeys() ([]KeySample, error) {
	v, _, err := t.acquire()
	if err != nil {
		return nil, err
	}
	defer v.unref()
	return t.sampleKeys(v), nil
}

// OwnBytes is the tablet's own bytes as SampleKeys weighs them — the last
// sample's Offset: the SSTable data blocks whose last key is in the
// tablet's range, and the keys and values in its memtables — computed
// without sampling the memtables (the master lists every tablet's bytes
// every few seconds while it is being written).
func (t *Tablet) OwnBytes() (int64, error) {
	v, _, err := t.acquire()
	if err != nil {
		return 0, err
	}
	defer v.unref()
	var n int64
	t.ownBlocks(v, func(_ []byte, length int64) { n += length })
	for _, m := range []*memtable.Memtable{v.mem, v.frozen} {
		if m != nil {
			n += m.PayloadBytes()
		}
	}
	return n, nil
}

// ownBlocks calls fn with the row of the last key and the length of every
// data block of v's SSTables whose last key's row the tablet holds — the
// blocks SampleKeys and OwnBytes weigh (a split child shares its parent's
// files and counts only its own side). row is only valid during the call.
func (t *Tablet) ownBlocks(v *version, fn func(row []byte, length int64)) {
	for _, g := range v.groups {
		for _, f := range g.files {
			for _, ie := range f.r.Index() {
				k, err := cell.DecodeKey(ie.LastKey)
				if err != nil || !t.Contains(k.Row) {
					continue
				}
				fn(k.Row, ie.Length)
			}
		}
	}
}

func (t *Tablet) sampleKeys(v *version) []KeySample {
	var raw []KeySample // Offset holds the sample's own weight here
	t.ownBlocks(v, func(row []byte, length int64) {
		raw = append(raw, KeySample{Row: bytes.Clone(row), Offset: length})
	})
	for _, m := range []*memtable.Memtable{v.mem, v.frozen} {
		if m == nil {
			continue
		}
		// A key about every memSampleBytes, from the skiplist's upper
		// levels: walking every entry cost a cache miss per entry (a
		// SampleRowKeys on a table held in memtables took milliseconds
		// per tablet).
		var prev int64
		m.Sample(memSampleBytes, func(key []byte, offset int64) {
			if k, err := cell.DecodeKey(key); err == nil && offset > prev {
				raw = append(raw, KeySample{Row: bytes.Clone(k.Row), Offset: offset - prev})
				prev = offset
			}
		})
	}
	slices.SortStableFunc(raw, func(a, b KeySample) int { return bytes.Compare(a.Row, b.Row) })
	var out []KeySample
	var total int64
	for _, s := range raw {
		total += s.Offset
		if n := len(out); n > 0 && bytes.Equal(out[n-1].Row, s.Row) {
			out[n-1].Offset = total
			continue
		}
		out = append(out, KeySample{Row: s.Row, Offset: total})
	}
	return out
}

// SplitResult describes a committed split: the parent's state now says it
// was split, the children's states are saved, and the caller opens them
// (with Options.Start/End nil or equal to their ranges).
type SplitResult struct {
	Key         []byte // the left child holds rows < Key, the right rows >= Key
	Left, Right tabletdesc.State
	// Stopped is when the parent stopped taking writes (answering "not
	// serving"): the rows are unserved from then until the children open.
	Stopped time.Time
	// UnservedFlushBytes is the size of the memtable flushed after the
	// parent stopped: what arrived during the flushes made while it
	// still served (FlushForHandoff), most of the unserved time in a
	// cluster.
	UnservedFlushBytes int64
	// Files are the parent's open files, for the children's
	// Options.Adopt; the caller must Release them once the children are
	// open (or will not be).
	Files *OpenFiles
}

// Split splits the tablet at a middle row key chosen from SampleKeys, as
// SplitAt does.
func (t *Tablet) Split(ctx context.Context) (SplitResult, error) {
	return t.SplitAt(ctx, nil)
}

// SplitAt splits the tablet into two children at key (nil: a middle key
// chosen by size). It flushes the memtable (as FlushForHandoff), stops
// accepting writes (ErrNotServing), flushes what arrived meanwhile, saves
// the children's states — which reference the parent's SSTables, so no
// data is copied — then marks the parent's state as split, and closes the
// parent. A crash before that last save leaves the parent intact (and
// orphan child states the master ignores); after it, both children are
// complete. If the split fails before committing, the parent goes on
// serving.
func (t *Tablet) SplitAt(ctx context.Context, key []byte) (SplitResult, error) {
	return t.split(ctx, key, t.chooseSplitKey)
}

// SplitBetweenRows is Split at a key between two adjacent rows near the
// tablet's middle: the immediate successor (row + 0x00) of the last row
// before the middle row Split would choose, so that the left child ends
// right after its last row and no key sorting between two adjacent rows
// of the tablet separates them. METADATA tablets split so (see
// meta.MetadataLookupKey): the first METADATA row at or after any lookup
// key is then always in the METADATA tablet holding the key, and a
// location lookup reads one tablet per level. Errors as SplitAt's;
// ErrCannotSplit when the tablet has fewer than two rows.
func (t *Tablet) SplitBetweenRows(ctx context.Context) (SplitResult, error) {
	return t.split(ctx, nil, t.chooseKeyBetweenRows)
}

// split is SplitAt with choose picking the key when key is nil.
func (t *Tablet) split(ctx context.Context, key []byte, choose func(context.Context, *version) ([]byte, error)) (SplitResult, error) {
	t.lockMaint()
	defer t.unlockMaint()
	if err := t.checkOpen(); err != nil {
		return SplitResult{}, err
	}
	if key != nil && (!t.Contains(key) || bytes.Equal(key, t.rng.Start)) {
		return SplitResult{}, fmt.Errorf("tablet %s: split key %q not strictly inside the range [%q, %q)", t.id, key, t.rng.Start, t.rng.End)
	}
	if err := t.flushForHandoffLocked(ctx); err != nil {
		return SplitResult{}, err
	}
	t.writeMu.Lock()
	if t.stopErr != nil {
		err := t.stopErr
		t.writeMu.Unlock()
		return SplitResult{}, err
	}
	t.stopErr = t.notServing(nil, "splitting")
	t.writeMu.Unlock()
	stopped := time.Now()
	res, err := t.splitLocked(ctx, key, choose)
	res.Stopped = stopped
	t.writeMu.Lock()
	if err != nil {
		if t.failed.Load() == nil {
			t.stopErr = nil
		}
	} else {
		t.stopErr = t.notServing(nil, fmt.Sprintf("split into %s and %s", res.Left.ID, res.Right.ID))
	}
	t.writeMu.Unlock()
	if err != nil {
		return SplitResult{}, err
	}
	t.closed.Store(true)
	close(t.stop)
	t.unlockMaint()
	<-t.bgDone // the background loop may wait for maintMu, its flusher for flushMu
	t.lockMaint()
	t.release()
	return res, nil
}

func (t *Tablet) splitLocked(ctx context.Context, key []byte, choose func(context.Context, *version) ([]byte, error)) (SplitResult, error) {
	unflushed, _ := t.MemtableBytes()
	if _, err := t.flushLocked(ctx); err != nil {
		return SplitResult{}, err
	}
	v, _, err := t.acquire()
	if err != nil {
		return SplitResult{}, err
	}
	defer v.unref()
	if key == nil {
		key, err = choose(ctx, v)
		if err != nil {
			return SplitResult{}, err
		}
	}
	var tail = t.state.RedoPoint
	if t.opts.Log != nil {
		tail = t.opts.Log.Tail()
	}
	t.writeMu.Lock()
	lastSeq := t.lastSeq
	t.writeMu.Unlock()
	child := func(start, end []byte) tabletdesc.State {
		st := t.state.Clone()
		st.ID = t.opts.NewID()
		st.Start, st.End = bytes.Clone(start), bytes.Clone(end)
		st.RedoPoint = tail
		st.LastSeq = max(st.LastSeq, lastSeq)
		st.Parent = t.id
		st.SplitInto, st.SplitKey = nil, nil
		// Only the files whose keys reach into the child's range.
		lo := cell.RowPrefix(start)
		var hi []byte
		if len(end) > 0 {
			hi = cell.RowPrefix(end)
		}
		for g, fs := range st.Groups {
			var keep []tabletdesc.FileMeta
			for _, f := range fs {
				if bytes.Compare(f.LargestKey, lo) < 0 || (hi != nil && bytes.Compare(f.SmallestKey, hi) >= 0) {
					continue
				}
				keep = append(keep, f)
			}
			if len(keep) == 0 {
				delete(st.Groups, g)
			} else {
				st.Groups[g] = keep
			}
		}
		return st
	}
	res := SplitResult{Key: bytes.Clone(key), Left: child(t.rng.Start, key), Right: child(key, t.rng.End), UnservedFlushBytes: unflushed}
	if res.Left.ID == res.Right.ID || res.Left.ID == t.id || res.Right.ID == t.id {
		return SplitResult{}, fmt.Errorf("tablet %s: NewID returned a duplicate ID", t.id)
	}
	// The children's states at once (the rows are unserved meanwhile: in
	// a cluster each save is an object store round trip); the parent's,
	// which commits the split, only once both are stored.
	var saveErrs [2]error
	var wg sync.WaitGroup
	for i, c := range []tabletdesc.State{res.Left, res.Right} {
		wg.Go(func() { saveErrs[i] = t.opts.StateStore.Save(ctx, c) })
	}
	wg.Wait()
	if err := errors.Join(saveErrs[:]...); err != nil {
		return SplitResult{}, err
	}
	st := t.state.Clone()
	st.SplitInto = []string{res.Left.ID, res.Right.ID}
	st.SplitKey = bytes.Clone(key)
	if err := t.opts.StateStore.Save(ctx, st); err != nil {
		return SplitResult{}, err
	}
	t.setState(st)
	res.Files = openFiles(v)
	return res, nil
}

// chooseSplitKey picks the sample at half of the tablet's bytes that
// leaves rows on both sides; with too few samples (a small tablet) it
// takes the middle of the rows.
func (t *Tablet) chooseSplitKey(ctx context.Context, v *version) ([]byte, error) {
	it := t.newIter(v, slices.Collect(func(yield func(string) bool) {
		for g := range v.groups {
			if !yield(g) {
				return
			}
		}
	}), t.lower, t.upper)
	defer it.Close()
	if !it.First() {
		if err := it.Error(); err != nil {
			return nil, err
		}
		return nil, ErrCannotSplit
	}
	first, err := cell.DecodeKey(it.Key())
	if err != nil {
		return nil, err
	}
	firstRow := bytes.Clone(first.Row)
	samples := t.sampleKeys(v)
	if n := len(samples); n > 0 {
		half := samples[n-1].Offset / 2
		best := -1
		for i, s := range samples {
			if bytes.Compare(s.Row, firstRow) <= 0 {
				continue
			}
			if best < 0 || abs(s.Offset-half) < abs(samples[best].Offset-half) {
				best = i
			}
		}
		if best >= 0 && len(samples) >= 4 {
			return samples[best].Row, nil
		}
	}
	// Few samples: list the rows (the tablet is small).
	var rows [][]byte
	for ok := true; ok; {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n := cell.RowPrefixLen(it.Key())
		k, err := cell.DecodeKey(it.Key())
		if n < 0 || err != nil {
			return nil, cell.ErrMalformedKey
		}
		rows = append(rows, bytes.Clone(k.Row))
		ok = it.SeekGE(cell.RowPrefix(append(bytes.Clone(k.Row), 0)))
	}
	if err := it.Error(); err != nil {
		return nil, err
	}
	if len(rows) < 2 {
		return nil, ErrCannotSplit
	}
	return rows[len(rows)/2], nil
}

// chooseKeyBetweenRows returns the immediate successor of the last row
// before the row chooseSplitKey picks (which is after the tablet's first
// row, so that row exists). It walks the rows from the last sample before
// the middle row: at most about a data block or a memtable sample's
// spacing of each source.
func (t *Tablet) chooseKeyBetweenRows(ctx context.Context, v *version) ([]byte, error) {
	mid, err := t.chooseSplitKey(ctx, v)
	if err != nil {
		return nil, err
	}
	from := t.lower
	for _, s := range t.sampleKeys(v) {
		if bytes.Compare(s.Row, mid) >= 0 {
			break
		}
		from = cell.RowPrefix(s.Row)
	}
	it := t.newIter(v, slices.Collect(func(yield func(string) bool) {
		for g := range v.groups {
			if !yield(g) {
				return
			}
		}
	}), t.lower, t.upper)
	defer it.Close()
	var prev []byte
	for ok := it.SeekGE(from); ok; {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		k, err := cell.DecodeKey(it.Key())
		if err != nil {
			return nil, err
		}
		if bytes.Compare(k.Row, mid) >= 0 {
			break
		}
		prev = bytes.Clone(k.Row)
		ok = it.SeekGE(cell.RowPrefix(append(bytes.Clone(k.Row), 0)))
	}
	if err := it.Error(); err != nil {
		return nil, err
	}
	if prev == nil {
		return nil, ErrCannotSplit
	}
	return append(prev, 0), nil
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
