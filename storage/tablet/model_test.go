package tablet

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/commitlog"
	"github.com/tabuladb/tabula/storage/sstable"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// The model: rows → family → qualifier → versions (newest first), with
// deletes applied eagerly and GC policies applied when reading, and
// physically at major compactions.
//
// A background merge of all of a group's files collects too (it is
// resolved as a major compaction, autoMergeLocked), at moments the model
// does not see. Reads cannot tell, since they apply the policies
// themselves — unless a version the policies collected becomes live again:
// a delete of the versions above it, or a policy that keeps more. The
// harness then deletes that column in the tablet and the model alike
// (forgetResurrected), which leaves one answer to every later read.
type mCell struct {
	ts  int64
	val string
	// An aggregate cell: num is the Sum/Min/Max state (val its 8 bytes),
	// set the distinct HLL inputs (val "hll:<exact count>").
	num int64
	set map[int64]bool
}

type model struct {
	rows map[string]map[string]map[string][]mCell
	// aggs: the aggregator of every aggregate family (they never change).
	aggs map[string]cell.Aggregator
	// hllInputs: the inputs each HLL state a MergeToCell carries holds.
	hllInputs map[string][]int64
}

func newModel() *model {
	return &model{rows: make(map[string]map[string]map[string][]mCell), aggs: map[string]cell.Aggregator{}, hllInputs: map[string][]int64{}}
}

// fold merges the input of an AddToCell or MergeToCell into c (fresh when
// the cell did not exist), the simple way.
func (m *model) fold(agg cell.Aggregator, c *mCell, fresh bool, mu cell.Mutation) {
	var ins []int64
	if agg == cell.HLLUniqueCount && mu.Kind == cell.MergeToCell {
		ins = m.hllInputs[string(mu.Value)]
	} else {
		ins = []int64{int64(binary.BigEndian.Uint64(mu.Value))}
	}
	for j, v := range ins {
		first := fresh && j == 0
		switch agg {
		case cell.Sum:
			if first {
				c.num = 0
			}
			c.num += v
		case cell.Min:
			if first || v < c.num {
				c.num = v
			}
		case cell.Max:
			if first || v > c.num {
				c.num = v
			}
		case cell.HLLUniqueCount:
			if first || c.set == nil {
				c.set = map[int64]bool{}
			}
			c.set[v] = true
		}
	}
	if agg == cell.HLLUniqueCount {
		c.val = fmt.Sprintf("hll:%d", len(c.set))
	} else {
		c.val = string(binary.BigEndian.AppendUint64(nil, uint64(c.num)))
	}
}

func (m *model) apply(rm cell.RowMutation) {
	row := string(rm.Row)
	for _, mu := range rm.Mutations {
		switch mu.Kind {
		case cell.DeleteFromRow:
			delete(m.rows, row)
		case cell.DeleteFromFamily:
			if r := m.rows[row]; r != nil {
				delete(r, mu.Family)
			}
		case cell.DeleteFromColumn:
			end := mu.EndTimestamp
			if end == 0 {
				end = 1 << 62
			}
			if r := m.rows[row]; r != nil && r[mu.Family] != nil {
				q := string(mu.Qualifier)
				r[mu.Family][q] = slices.DeleteFunc(r[mu.Family][q], func(c mCell) bool { return c.ts >= mu.StartTimestamp && c.ts < end })
			}
		case cell.SetCell, cell.AddToCell, cell.MergeToCell:
			r := m.rows[row]
			if r == nil {
				r = make(map[string]map[string][]mCell)
				m.rows[row] = r
			}
			f := r[mu.Family]
			if f == nil {
				f = make(map[string][]mCell)
				r[mu.Family] = f
			}
			q := string(mu.Qualifier)
			vs := f[q]
			i, found := slices.BinarySearchFunc(vs, mu.Timestamp, func(c mCell, ts int64) int {
				switch {
				case c.ts > ts:
					return -1
				case c.ts < ts:
					return 1
				}
				return 0
			})
			if agg := m.aggs[mu.Family]; agg != cell.NoAggregator {
				if !found {
					vs = slices.Insert(vs, i, mCell{ts: mu.Timestamp})
				}
				m.fold(agg, &vs[i], !found, mu)
			} else if found {
				vs[i].val = string(mu.Value)
			} else {
				vs = slices.Insert(vs, i, mCell{ts: mu.Timestamp, val: string(mu.Value)})
			}
			f[q] = vs
		}
	}
}

func (m *model) dropFamily(fam string) {
	for _, r := range m.rows {
		delete(r, fam)
	}
}

// mVersion names one version of a column of a row.
type mVersion struct {
	row, fam, qual string
	ts             int64
}

// collectable returns the versions of rows (every row when rows is nil)
// that the policies collect at now.
func (m *model) collectable(rows []string, fams map[string]tabletdesc.Family, now int64) map[mVersion]bool {
	out := map[mVersion]bool{}
	if rows == nil {
		rows = slices.Collect(maps.Keys(m.rows))
	}
	for _, row := range rows {
		for fname, f := range m.rows[row] {
			fam, ok := fams[fname]
			if !ok {
				continue
			}
			for q, vs := range f {
				for i, c := range vs {
					if fam.GC.Collects(i, c.ts, now) {
						out[mVersion{row, fname, q, c.ts}] = true
					}
				}
			}
		}
	}
	return out
}

// resurrected returns, in a stable order, the columns holding a version of
// before (collectable then) that is still there and no longer collectable
// at now.
func (m *model) resurrected(before map[mVersion]bool, fams map[string]tabletdesc.Family, now int64) []mVersion {
	var rows []string
	for v := range before {
		rows = append(rows, v.row)
	}
	slices.Sort(rows)
	rows = slices.Compact(rows)
	after := m.collectable(rows, fams, now)
	cols := map[mVersion]bool{}
	for v := range before {
		if after[v] {
			continue
		}
		if slices.ContainsFunc(m.rows[v.row][v.fam][v.qual], func(c mCell) bool { return c.ts == v.ts }) {
			cols[mVersion{v.row, v.fam, v.qual, 0}] = true
		}
	}
	out := slices.Collect(maps.Keys(cols))
	slices.SortFunc(out, func(a, b mVersion) int {
		return cmp.Or(cmp.Compare(a.row, b.row), cmp.Compare(a.fam, b.fam), cmp.Compare(a.qual, b.qual))
	})
	return out
}

// forgetResurrected deletes, in the tablets and the model, every column
// where a version collectable in before came back (see the model's doc)
// and a collecting merge may have collected it: one ran since the version
// was written.
func (h *harness) forgetResurrected(before map[mVersion]bool) {
	for v := range before {
		if w, ok := h.written[v]; ok && w >= h.rowCollecting([]byte(v.row)) {
			delete(before, v) // no collecting merge since its write
		}
	}
	for _, c := range h.m.resurrected(before, h.schema.Families, h.clock.Load()) {
		h.count("column of a resurrected version deleted")
		rm := cell.RowMutation{Row: []byte(c.row), Mutations: []cell.Mutation{cell.DeleteColumn(c.fam, []byte(c.qual), 0, 0)}}
		if err := h.tabletFor(rm.Row).Apply(h.ctx, rm); err != nil {
			h.fatalf("deleting the column of a resurrected version %+v: %v", c, err)
		}
		h.m.apply(rm)
	}
}

// gc removes, in rows of [start, end), what the policies collect at now.
func (m *model) gc(fams map[string]tabletdesc.Family, start, end []byte, now int64) {
	for row, r := range m.rows {
		if !inRange([]byte(row), start, end) {
			continue
		}
		for fname, f := range r {
			for q, vs := range f {
				for i, c := range vs {
					if fams[fname].GC.Collects(i, c.ts, now) {
						f[q] = vs[:i]
						break
					}
				}
			}
		}
	}
}

func inRange(row, start, end []byte) bool {
	return bytes.Compare(row, start) >= 0 && (len(end) == 0 || bytes.Compare(row, end) < 0)
}

func (m *model) read(row string, fams map[string]tabletdesc.Family, ro ReadOptions, now int64) (cell.Row, bool) {
	r := m.rows[row]
	var vs []cellVersion
	for _, fname := range slices.Sorted(maps.Keys(r)) {
		fam, ok := fams[fname]
		if !ok {
			continue
		}
		for _, q := range slices.Sorted(maps.Keys(r[fname])) {
			for i, c := range r[fname][q] {
				if fam.GC.Collects(i, c.ts, now) {
					break
				}
				vs = append(vs, cellVersion{key: cell.Key{Family: fname, Qualifier: []byte(q), Timestamp: c.ts}, value: []byte(c.val)})
			}
		}
	}
	cells := filterVersions(vs, ro)
	if len(cells) == 0 {
		return cell.Row{}, false
	}
	return cell.Row{Key: []byte(row), Cells: cells}, true
}

func rowString(r cell.Row) string { return string(r.Key) + ": " + cellsString(r.Cells) }

// harness drives tablets and the model with one seeded random sequence.
type harness struct {
	t       testing.TB
	seed    uint64
	op      int
	r       *rand.Rand
	ctx     context.Context
	store   blob.Store
	states  StateStore
	logOpts commitlog.Options
	log     *commitlog.Log
	cache   *sstable.Cache
	scache  *ScanCache
	schema  tabletdesc.Schema
	clock   atomic.Int64
	tablets []*Tablet // ordered by range
	m       *model
	counts  map[string]int
	// memOnly: no operation that writes SSTables (flushes, compactions,
	// splits, reopens); the memtable must hold everything.
	memOnly bool
	// agg adds aggregate families (aggFamilies) written with AddToCell
	// and MergeToCell.
	agg bool
	// retiredMerges and retiredCollected: the collecting merges begun
	// and the entries flushes collected in tablets no longer in tablets
	// (see collectingMerges and flushCollected). lineage: per tablet, the
	// collecting merges and flushes begun in the tablets it succeeded
	// (the one it reopened, the one it was split from, and theirs) — with
	// its own, those that may have collected a version of one of its
	// rows. written: per version, that number for its row when it was
	// last written — a merge or flush begun before cannot have collected
	// it.
	retiredMerges, retiredCollected uint64
	lineage                         map[*Tablet]uint64
	written                         map[mVersion]uint64
}

// mayCollect is the number of collecting merges (autoMergeLocked) and
// flushes (flushcollect.go) begun in tb: one still under way — the
// background's run beside the harness's operations — may already have
// decided to collect a version.
func mayCollect(tb *Tablet) uint64 {
	return tb.collectingBegun.Load() + tb.flushesCollecting.Load()
}

// collectingMerges is the number of collecting merges begun in every
// tablet the harness opened so far.
func (h *harness) collectingMerges() uint64 {
	n := h.retiredMerges
	for _, tb := range h.tablets {
		n += tb.collectingBegun.Load()
	}
	return n
}

// flushCollected is the number of entries the flushes of every tablet the
// harness opened so far left out of their files.
func (h *harness) flushCollected() uint64 {
	n := h.retiredCollected
	for _, tb := range h.tablets {
		n += tb.flushCollected.Load()
	}
	return n
}

// succeed replaces tb, which the harness drops, by next (tb reopened, or
// the two halves of its split): they inherit the collecting merges and
// flushes that may have collected versions of their rows.
func (h *harness) succeed(tb *Tablet, next ...*Tablet) {
	h.retiredMerges += tb.collectingBegun.Load()
	h.retiredCollected += tb.flushCollected.Load()
	begun := mayCollect(tb)
	if h.lineage == nil {
		h.lineage = map[*Tablet]uint64{}
	}
	for _, n := range next {
		h.lineage[n] = h.lineage[tb] + begun
	}
	delete(h.lineage, tb)
}

// rowCollecting is the number of collecting merges and flushes begun so
// far that may have collected a version of row: those of its tablet and
// of the tablets its tablet succeeded.
func (h *harness) rowCollecting(row []byte) uint64 {
	tb := h.tabletFor(row)
	return h.lineage[tb] + mayCollect(tb)
}

// noteWrites records when the versions rm writes were written.
//
// n is rowCollecting(rm.Row) read before the write was applied: a flush
// may freeze the memtable the write went into, and begin collecting in
// it, before the write returns — only what began before the write cannot
// have collected it.
func (h *harness) noteWrites(rm cell.RowMutation, n uint64) {
	if h.written == nil {
		h.written = map[mVersion]uint64{}
	}
	for _, mu := range rm.Mutations {
		switch mu.Kind {
		case cell.SetCell, cell.AddToCell, cell.MergeToCell:
			h.written[mVersion{string(rm.Row), mu.Family, string(mu.Qualifier), mu.Timestamp}] = n
		}
	}
}

// aggFamilies are the aggregate families of the harness with agg set, one
// per aggregator, in both locality groups.
var aggFamilies = map[string]cell.Aggregator{"s": cell.Sum, "n": cell.Min, "x": cell.Max, "h": cell.HLLUniqueCount}

// norm replaces the value of every cell of an HLL family by "hll:<estimate>"
// (the model's is the exact count, which the estimate equals for the few
// inputs a cell gets here): HLL states are not canonical bytes.
func (h *harness) norm(r cell.Row) cell.Row {
	for i, c := range r.Cells {
		if aggFamilies[c.Family] == cell.HLLUniqueCount && h.agg && !bytes.HasPrefix(c.Value, []byte("hll:")) {
			n, err := cell.HLLEstimate(c.Value)
			if err != nil {
				h.fatalf("cell %s:%s of row %s: %v", c.Family, c.Qualifier, r.Key, err)
			}
			r.Cells[i].Value = fmt.Appendf(nil, "hll:%d", n)
		}
	}
	return r
}

// aggMutation returns an AddToCell or a MergeToCell of the aggregate family
// fam; timestamps come from a small set so that writes of one cell meet.
func (h *harness) aggMutation(fam string) cell.Mutation {
	ts := h.ts()
	if ts == cell.ServerTimestamp || h.r.IntN(2) == 0 {
		ts = int64(h.r.IntN(4)) * 1000
	}
	agg := aggFamilies[fam]
	input := func() int64 {
		if agg == cell.HLLUniqueCount {
			return int64(h.r.IntN(40))
		}
		return int64(h.r.IntN(2001) - 1000)
	}
	if h.r.IntN(3) > 0 {
		return cell.Add(fam, h.qual(), ts, input())
	}
	if agg != cell.HLLUniqueCount {
		return cell.Merge(fam, h.qual(), ts, binary.BigEndian.AppendUint64(nil, uint64(input())))
	}
	// A state of a few inputs, built by merging their states as a client
	// holding a sketch would.
	ins := []int64{input()}
	state, err := agg.InputState(ins[0])
	for range h.r.IntN(3) {
		v := input()
		ins = append(ins, v)
		one, err2 := agg.InputState(v)
		if err2 == nil {
			state, err2 = agg.Merge(state, one)
		}
		err = errors.Join(err, err2)
	}
	if err != nil {
		h.fatalf("building an HLL state: %v", err)
	}
	h.m.hllInputs[string(state)] = ins
	return cell.Merge(fam, h.qual(), ts, state)
}

// plainFamily returns a family that is not an aggregate one.
func (h *harness) plainFamily() string {
	for {
		if f := h.family(); aggFamilies[f] == cell.NoAggregator || !h.agg {
			return f
		}
	}
}

func (h *harness) fatalf(format string, args ...any) {
	h.t.Helper()
	h.t.Fatalf("seed %d, operation %d: %s", h.seed, h.op, fmt.Sprintf(format, args...))
}

func (h *harness) options(id string) Options {
	return Options{
		ID: id, Schema: h.schema, Store: h.store, Dir: "sst",
		Log: h.log, LogOptions: h.logOpts,
		Cache: h.cache, ScanCache: h.scache, StateStore: h.states,
		MemtableBytes: h.memtableBytes(), MaxSSTables: 4,
		Clock:  func() int64 { return h.clock.Load() },
		Logger: slog.New(slog.DiscardHandler),
	}
}

func (h *harness) memtableBytes() int64 {
	if h.memOnly {
		return 1 << 40
	}
	return 8 << 10
}

func (h *harness) open(id string) *Tablet {
	tb, err := Open(h.ctx, h.options(id))
	if err != nil {
		h.fatalf("open %s: %v", id, err)
	}
	return tb
}

var families = []string{"a", "b", "c", "d"}

func (h *harness) randomPolicy(depth int) tabletdesc.GCPolicy {
	switch h.r.IntN(6) {
	case 0, 1:
		return tabletdesc.GCPolicy{}
	case 2:
		return tabletdesc.GCPolicy{MaxVersions: 1 + h.r.IntN(3)}
	case 3:
		return tabletdesc.GCPolicy{MaxAge: time.Duration(500+h.r.IntN(3000)) * time.Microsecond}
	}
	if depth > 1 {
		return tabletdesc.GCPolicy{MaxVersions: 2}
	}
	p := tabletdesc.GCPolicy{}
	list := []tabletdesc.GCPolicy{h.randomPolicy(depth + 1), h.randomPolicy(depth + 1)}
	if h.r.IntN(2) == 0 {
		p.Union = list
	} else {
		p.Intersection = list
	}
	return p
}

func (h *harness) randomSchema(dropD bool) tabletdesc.Schema {
	s := tabletdesc.Schema{
		Families: map[string]tabletdesc.Family{},
		LocalityGroups: map[string]tabletdesc.LocalityGroup{
			"default": {BlockSize: 256, Compression: tabletdesc.Compression(h.r.IntN(3))},
			"mem":     {InMemory: true, BlockSize: 512, Compression: tabletdesc.SnappyCompression},
		},
	}
	for i, f := range families {
		if f == "d" && dropD {
			continue
		}
		g := "default"
		if i%2 == 1 {
			g = "mem"
		}
		s.Families[f] = tabletdesc.Family{GC: h.randomPolicy(0), LocalityGroup: g}
	}
	if h.agg {
		for i, f := range slices.Sorted(maps.Keys(aggFamilies)) {
			g := "default"
			if i%2 == 1 {
				g = "mem"
			}
			s.Families[f] = tabletdesc.Family{GC: h.randomPolicy(0), LocalityGroup: g, Aggregate: aggFamilies[f]}
		}
	}
	return s
}

func (h *harness) row() []byte { return fmt.Appendf(nil, "r%03d", h.r.IntN(60)) }

func (h *harness) ts() int64 {
	switch h.r.IntN(4) {
	case 0:
		return cell.ServerTimestamp
	case 1:
		return int64(h.r.IntN(6)) * 1000
	}
	return max(0, h.clock.Load()-int64(h.r.IntN(4000)))
}

func (h *harness) family() string {
	fams := slices.Sorted(maps.Keys(h.schema.Families))
	return fams[h.r.IntN(len(fams))]
}

func (h *harness) qual() []byte {
	if h.r.IntN(10) == 0 {
		return []byte{}
	}
	return fmt.Appendf(nil, "q%d", h.r.IntN(4))
}

func (h *harness) mutation() cell.RowMutation {
	rm := cell.RowMutation{Row: h.row()}
	for range 1 + h.r.IntN(4) {
		var m cell.Mutation
		switch x := h.r.IntN(20); {
		case x < 13:
			f := h.family()
			if h.agg && aggFamilies[f] != cell.NoAggregator {
				m = h.aggMutation(f)
			} else {
				m = cell.Set(f, h.qual(), h.ts(), fmt.Appendf(nil, "v%d", h.op))
			}
		case x < 17:
			start := int64(h.r.IntN(6)) * 1000
			if h.r.IntN(2) == 0 {
				start = max(0, h.clock.Load()-int64(h.r.IntN(4000)))
			}
			end := int64(0)
			if h.r.IntN(3) > 0 {
				end = start + int64(h.r.IntN(3000))
			}
			m = cell.DeleteColumn(h.family(), h.qual(), start, end)
		case x < 19:
			m = cell.DeleteFamily(h.family())
		default:
			m = cell.DeleteRow()
		}
		rm.Mutations = append(rm.Mutations, m)
	}
	return rm
}

func (h *harness) tabletFor(row []byte) *Tablet {
	for _, tb := range h.tablets {
		if tb.Contains(row) {
			return tb
		}
	}
	h.fatalf("no tablet for row %q", row)
	return nil
}

func (h *harness) readOptions() ReadOptions {
	var ro ReadOptions
	if h.r.IntN(3) == 0 {
		ro.Families = []string{}
		for _, f := range families {
			if h.r.IntN(2) == 0 {
				ro.Families = append(ro.Families, f)
			}
		}
	}
	if h.r.IntN(6) == 0 {
		ro.Columns = []Column{{Family: h.family(), Qualifier: h.qual()}}
	}
	if h.r.IntN(3) == 0 {
		ro.StartTimestamp = int64(h.r.IntN(6)) * 1000
		if h.r.IntN(2) == 0 {
			ro.StartTimestamp = max(0, h.clock.Load()-int64(h.r.IntN(4000)))
		}
		if h.r.IntN(2) == 0 {
			ro.EndTimestamp = ro.StartTimestamp + 1 + int64(h.r.IntN(4000))
		}
	}
	if h.r.IntN(3) == 0 {
		ro.MaxVersions = 1 + h.r.IntN(3)
	}
	return ro
}

func (h *harness) count(what string) { h.counts[what]++ }

func (h *harness) step() {
	ctx := h.ctx
	h.clock.Add(int64(h.r.IntN(60)))
	x := h.r.IntN(1000)
	if h.memOnly && x >= 800 && x < 895 {
		x = 700
	}
	switch {
	case x < 130:
		// A batch of one tablet's rows, in no order and with rows
		// repeated: ApplyBatch applies them in key order, each row's
		// entries in the batch's order.
		h.count("apply batch")
		first := h.mutation()
		tb := h.tabletFor(first.Row)
		rms := []cell.RowMutation{first}
		for range 1 + h.r.IntN(6) {
			rm := h.mutation()
			if h.r.IntN(3) == 0 {
				rm.Row = rms[h.r.IntN(len(rms))].Row
			}
			if tb.Contains(rm.Row) {
				rms = append(rms, rm)
			}
		}
		var rows []string
		wants := make([]cell.RowMutation, len(rms))
		for i, rm := range rms {
			wants[i] = rm.Clone()
			wants[i].AssignTimestamps(h.clock.Load())
			rows = append(rows, string(rm.Row))
		}
		before := h.m.collectable(rows, h.schema.Families, h.clock.Load())
		collecting := h.rowCollecting(first.Row) // one tablet: the same for every row
		for i, err := range tb.ApplyBatch(ctx, rms) {
			if err != nil {
				h.fatalf("apply batch entry %d %+v: %v", i, rms[i], err)
			}
		}
		for _, want := range wants {
			h.m.apply(want)
			h.noteWrites(want, collecting)
		}
		h.forgetResurrected(before)
	case x < 520:
		h.count("apply")
		rm := h.mutation()
		want := rm.Clone()
		want.AssignTimestamps(h.clock.Load())
		before := h.m.collectable([]string{string(rm.Row)}, h.schema.Families, h.clock.Load())
		collecting := h.rowCollecting(rm.Row)
		if err := h.tabletFor(rm.Row).Apply(ctx, rm); err != nil {
			h.fatalf("apply %+v: %v", rm, err)
		}
		h.m.apply(want)
		h.noteWrites(want, collecting)
		h.forgetResurrected(before)
	case x < 540:
		h.count("invalid apply")
		rm := h.mutation()
		rm.Mutations = append(rm.Mutations, cell.Set("nosuch", nil, 1, nil))
		if err := h.tabletFor(rm.Row).Apply(ctx, rm); !errors.Is(err, ErrFamilyNotFound) {
			h.fatalf("apply with an unknown family: %v", err)
		}
		if h.agg {
			h.count("invalid aggregate apply")
			h.badAggregateApply()
		}
		if len(h.tablets) > 1 {
			rm := h.mutation()
			for _, tb := range h.tablets {
				if !tb.Contains(rm.Row) {
					if err := tb.Apply(ctx, rm); !errors.Is(err, tabletdesc.ErrNotServing) {
						h.fatalf("apply outside the range: %v", err)
					}
					break
				}
			}
		}
	case x < 560:
		h.count("read-modify-write")
		row := h.row()
		fam := h.plainFamily()
		var mcur cell.Row
		mcur, _ = h.m.read(string(row), h.schema.Families, ReadOptions{}, h.clock.Load())
		incr := func(cur cell.Row) ([]cell.Mutation, error) {
			n := 0
			for _, c := range cur.Cells {
				if c.Family == fam && string(c.Qualifier) == "ctr" {
					n, _ = strconv.Atoi(string(c.Value))
					break
				}
			}
			return []cell.Mutation{cell.Set(fam, []byte("ctr"), cell.ServerTimestamp, []byte(strconv.Itoa(n+1)))}, nil
		}
		muts, _ := incr(mcur)
		rm := cell.RowMutation{Row: row, Mutations: muts}
		rm.AssignTimestamps(h.clock.Load())
		h.m.apply(rm)
		h.noteWrites(rm, h.rowCollecting(rm.Row)) // before the write
		got, err := h.tabletFor(row).ReadModifyWrite(ctx, row, incr)
		if err != nil {
			h.fatalf("read-modify-write: %v", err)
		}
		want, _ := h.m.read(string(row), h.schema.Families, ReadOptions{}, h.clock.Load())
		got = h.norm(got)
		if rowString(got) != rowString(want) {
			h.fatalf("read-modify-write of %s:\n got  %s\n want %s", row, rowString(got), rowString(want))
		}
	case x < 720:
		h.count("read row")
		row := h.row()
		ro := h.readOptions()
		got, ok, err := h.tabletFor(row).ReadRow(ctx, row, ro)
		if err != nil {
			h.fatalf("read %s: %v", row, err)
		}
		got = h.norm(got)
		want, wok := h.m.read(string(row), h.schema.Families, ro, h.clock.Load())
		if ok != wok || rowString(got) != rowString(want) {
			h.fatalf("read %s %+v:\n got  %v %s\n want %v %s", row, ro, ok, rowString(got), wok, rowString(want))
		}
	case x < 800:
		h.count("scan")
		h.scan()
	case x < 820:
		h.count("flush")
		if err := h.tablets[h.r.IntN(len(h.tablets))].Flush(ctx); err != nil {
			h.fatalf("flush: %v", err)
		}
	case x < 830:
		h.count("release log and truncate")
		h.releaseAndTruncate()
	case x < 845:
		h.count("merging compaction")
		if err := h.tablets[h.r.IntN(len(h.tablets))].Compact(ctx, false); err != nil {
			h.fatalf("merging compaction: %v", err)
		}
	case x < 860:
		// The newest k files of each group: kept whole, or collected
		// as the background's merges collect (autoMergeLocked; all k
		// resolved as a major when k is every file).
		collect := h.r.IntN(2) == 0
		if collect {
			h.count("partial collecting merge")
		} else {
			h.count("partial merging compaction")
		}
		tb := h.tablets[h.r.IntN(len(h.tablets))]
		tb.maintMu.Lock()
		var err error
		for _, g := range tb.groupNames() {
			if n := tb.groupLen(g); n > 1 {
				k := 2 + h.r.IntN(n-1)
				if collect {
					err = errors.Join(err, tb.autoMergeLocked(ctx, g, k))
				} else {
					err = errors.Join(err, tb.mergeLocked(ctx, g, k))
				}
			}
		}
		tb.maintMu.Unlock()
		if err != nil {
			h.fatalf("partial merging compaction: %v", err)
		}
	case x < 870:
		h.count("major compaction")
		i := h.r.IntN(len(h.tablets))
		tb := h.tablets[i]
		if err := tb.Compact(ctx, true); err != nil {
			h.fatalf("major compaction: %v", err)
		}
		r := tb.Range()
		h.m.gc(h.schema.Families, r.Start, r.End, h.clock.Load())
	case x < 880:
		h.count("split")
		h.split()
	case x < 890:
		h.count("close and reopen")
		i := h.r.IntN(len(h.tablets))
		if err := h.tablets[i].Close(); err != nil {
			h.fatalf("close: %v", err)
		}
		next := h.open(h.tablets[i].ID())
		h.succeed(h.tablets[i], next)
		h.tablets[i] = next
	case x < 895:
		h.count("crash and recover")
		h.crash()
	case x < 905:
		h.count("set schema")
		h.setSchema()
	case x < 930:
		h.count("clock jump")
		h.clock.Add(int64(h.r.IntN(3000)))
	default:
		h.count("sample keys")
		tb := h.tablets[h.r.IntN(len(h.tablets))]
		s, err := tb.SampleKeys()
		if err != nil {
			h.fatalf("sample keys: %v", err)
		}
		for i, k := range s {
			if !tb.Contains(k.Row) || (i > 0 && (bytes.Compare(s[i-1].Row, k.Row) >= 0 || s[i-1].Offset > k.Offset)) {
				h.fatalf("bad samples %v", s)
			}
		}
	}
}

func (h *harness) scan() {
	so := ScanOptions{Reverse: h.r.IntN(2) == 0, ReadOptions: h.readOptions()}
	if h.r.IntN(2) == 0 {
		so.Start = h.row()
	}
	if h.r.IntN(2) == 0 {
		so.End = h.row()
	}
	if h.r.IntN(3) == 0 {
		so.Limit = 1 + h.r.IntN(5)
	}
	var want []string
	for _, row := range slices.Sorted(maps.Keys(h.m.rows)) {
		if !inRange([]byte(row), so.Start, so.End) {
			continue
		}
		if r, ok := h.m.read(row, h.schema.Families, so.ReadOptions, h.clock.Load()); ok {
			want = append(want, rowString(r))
		}
	}
	order := slices.Clone(h.tablets)
	if so.Reverse {
		slices.Reverse(want)
		slices.Reverse(order)
	}
	if so.Limit > 0 && len(want) > so.Limit {
		want = want[:so.Limit]
	}
	// The rows are kept and compared once every tablet was scanned: a
	// row a scan returned must stay intact while the scan goes on (rows
	// share the scan's key and cell slabs).
	var rows []cell.Row
	for _, tb := range order {
		tso := so
		if so.Limit > 0 {
			if len(rows) >= so.Limit {
				break
			}
			tso.Limit = so.Limit - len(rows)
		}
		err := tb.Scan(h.ctx, tso, func(r cell.Row) error {
			rows = append(rows, r)
			return nil
		})
		if err != nil {
			h.fatalf("scan: %v", err)
		}
	}
	var got []string
	for _, r := range rows {
		got = append(got, rowString(h.norm(r)))
	}
	if !slices.Equal(got, want) {
		h.fatalf("scan %+v:\n got  %q\n want %q", so, got, want)
	}
}

func (h *harness) split() {
	if len(h.tablets) >= 4 {
		return
	}
	i := h.r.IntN(len(h.tablets))
	parent := h.tablets[i]
	res, err := parent.Split(h.ctx)
	if errors.Is(err, ErrCannotSplit) {
		return
	}
	if err != nil {
		h.fatalf("split: %v", err)
	}
	if _, err := Open(h.ctx, h.options(parent.ID())); !errors.Is(err, ErrSplit) {
		h.fatalf("opening a split parent: %v", err)
	}
	if err := parent.Apply(h.ctx, h.mutation()); !errors.Is(err, tabletdesc.ErrNotServing) {
		h.fatalf("apply to a split parent: %v", err)
	}
	// The children adopt the parent's open files, as a tablet server's do,
	// or open them again, as after a restart.
	adopt := res.Files
	if h.r.IntN(2) == 0 {
		adopt = nil
	}
	open := func(id string) *Tablet {
		opts := h.options(id)
		opts.Adopt = adopt
		tb, err := Open(h.ctx, opts)
		if err != nil {
			h.fatalf("open %s: %v", id, err)
		}
		return tb
	}
	left, right := open(res.Left.ID), open(res.Right.ID)
	res.Files.Release()
	h.succeed(h.tablets[i], left, right)
	h.tablets = slices.Replace(h.tablets, i, i+1, left, right)
}

// crash abandons every tablet as kill -9 would (no flush, no state saved),
// reopens the log and recovers the tablets from their states and the log.
func (h *harness) crash() {
	for _, tb := range h.tablets {
		tb.abandon()
	}
	if h.log != nil {
		_ = h.log.Close()
		log, err := commitlog.Open(h.ctx, h.logOpts)
		if err != nil {
			h.fatalf("reopen log: %v", err)
		}
		h.log = log
	}
	for i, tb := range h.tablets {
		next := h.open(tb.ID())
		h.succeed(tb, next)
		h.tablets[i] = next
	}
}

// releaseAndTruncate has a tablet release the log (Tablet.ReleaseLog),
// then truncates the log to the oldest redo point of the tablets, as the
// tablet server does (Host.TruncateLog): a later crash must still recover
// every acknowledged write.
func (h *harness) releaseAndTruncate() {
	if err := h.tablets[h.r.IntN(len(h.tablets))].ReleaseLog(h.ctx); err != nil {
		h.fatalf("release log: %v", err)
	}
	oldest := h.tablets[0].State().RedoPoint
	for _, tb := range h.tablets[1:] {
		if p := tb.State().RedoPoint; p.Compare(oldest) < 0 {
			oldest = p
		}
	}
	if err := h.log.Truncate(h.ctx, oldest); err != nil {
		h.fatalf("truncate the log: %v", err)
	}
}

func (h *harness) setSchema() {
	old := h.schema
	_, hadD := old.Families["d"]
	s := h.randomSchema(hadD && h.r.IntN(2) == 0)
	// Keep most policies; a schema change touches one family at a time.
	for name, f := range old.Families {
		if nf, ok := s.Families[name]; ok && name != families[h.r.IntN(len(families))] {
			nf.GC = f.GC
			s.Families[name] = nf
		}
	}
	s.LocalityGroups = old.LocalityGroups
	before := h.m.collectable(nil, old.Families, h.clock.Load())
	defer h.forgetResurrected(before)
	for _, tb := range h.tablets {
		if err := tb.SetSchema(h.ctx, s); err != nil {
			h.fatalf("set schema: %v", err)
		}
	}
	if _, ok := s.Families["d"]; !ok && hadD {
		h.m.dropFamily("d")
	}
	h.schema = s
}

func (h *harness) close() {
	for _, tb := range h.tablets {
		if h.memOnly {
			tb.abandon()
			continue
		}
		if err := tb.Close(); err != nil {
			h.t.Errorf("close: %v", err)
		}
	}
	if h.log != nil {
		h.log.Close()
	}
	h.scache.Close()
}

func runModel(t *testing.T, seed uint64, ops int, memOnly bool) map[string]int {
	// The log in object mode on the memory store: no fsync per write.
	return runModelOn(t, seed, ops, memOnly, blob.NewMemory(), true, false)
}

// runModelWith runs the model with everything — SSTables, states and the
// commit log (object mode) — in store.
func runModelWith(t *testing.T, seed uint64, ops int, store blob.Store) map[string]int {
	return runModelOn(t, seed, ops, false, store, true, false)
}

func runModelOn(t *testing.T, seed uint64, ops int, memOnly bool, store blob.Store, logInStore, agg bool) map[string]int {
	ctx := context.Background()
	h := &harness{t: t, seed: seed, r: rand.New(rand.NewPCG(seed, 0x7AB1E)), ctx: ctx, m: newModel(), counts: map[string]int{}, memOnly: memOnly, agg: agg}
	if agg {
		h.m.aggs = aggFamilies
	}
	h.clock.Store(1_000_000)
	h.store = store
	h.states = NewBlobStateStore(h.store, "state")
	// Small segments, so that the log rolls over and truncation deletes
	// segments.
	h.logOpts = commitlog.Options{Dir: t.TempDir(), SegmentBytes: 16 << 10}
	if logInStore {
		h.logOpts = commitlog.Options{Store: store, Prefix: "log", SegmentBytes: 16 << 10}
	}
	log, err := commitlog.Open(ctx, h.logOpts)
	if err != nil {
		t.Fatal(err)
	}
	h.log = log
	if !memOnly {
		h.cache = sstable.NewCache(256 << 10)
	}
	h.scache, err = NewScanCache(256 << 10)
	if err != nil {
		t.Fatal(err)
	}
	h.schema = h.randomSchema(false)
	h.tablets = []*Tablet{h.open("root")}
	defer h.close()
	for h.op = 0; h.op < ops; h.op++ {
		h.step()
	}
	// A last full comparison.
	h.op = -1
	for _, ro := range []ReadOptions{{}} {
		for _, row := range slices.Sorted(maps.Keys(h.m.rows)) {
			want, wok := h.m.read(row, h.schema.Families, ro, h.clock.Load())
			got, ok, err := h.tabletFor([]byte(row)).ReadRow(ctx, []byte(row), ro)
			got = h.norm(got)
			if err != nil || ok != wok || rowString(got) != rowString(want) {
				h.fatalf("final read %s: got %v %s (%v), want %v %s", row, ok, rowString(got), err, wok, rowString(want))
			}
		}
	}
	h.counts["collecting merge"] = int(h.collectingMerges())
	h.counts["entries collected by flushes"] = int(h.flushCollected())
	// The scan cache's hits must be among the reads compared, or its path
	// (rows cached under a generation of files) went untested.
	if st := h.scache.Stats(); !memOnly && st.Hits == 0 {
		t.Fatalf("no read was served by the scan cache (%d misses)", st.Misses)
	} else {
		h.counts["scan cache hits"] = int(st.Hits)
	}
	return h.counts
}

// TestModel drives random operations against tablets and the in-memory
// model and compares every read. TABULA_LONG=1 runs more seeds and longer
// sequences; TABULA_MODEL_SEED=n replays one seed.
func TestModel(t *testing.T) {
	seeds := []uint64{1, 2}
	ops := 10_000
	if os.Getenv("TABULA_LONG") != "" {
		seeds = nil
		for s := uint64(1); s <= 20; s++ {
			seeds = append(seeds, s)
		}
		ops = 30_000
	}
	if s := os.Getenv("TABULA_MODEL_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seeds = []uint64{n}
	}
	collecting, flushCollected := 0, 0
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			counts := runModel(t, seed, ops, false)
			t.Logf("seed %d: %d operations: %v", seed, ops, counts)
			collecting += counts["collecting merge"]
			flushCollected += counts["entries collected by flushes"]
		})
	}
	// Background merges of whole groups collect as majors do, and flushes
	// collect in their memtables; reads after them must have been
	// compared (some seeds have none).
	if collecting == 0 && !t.Failed() {
		t.Errorf("no collecting merge in any of the %d seeds", len(seeds))
	}
	if flushCollected == 0 && !t.Failed() {
		t.Errorf("no flush collected an entry in any of the %d seeds", len(seeds))
	}
}

// TestModelMemtable runs the model with everything in the memtable: the
// read path, deletes, GC and read-modify-write without SSTables.
func TestModelMemtable(t *testing.T) {
	counts := runModel(t, 99, 5000, true)
	t.Logf("%v", counts)
}

// badAggregateApply checks that writes not matching their family's type are
// INVALID_ARGUMENT naming the field, and change nothing (the model is not
// touched; the next reads compare).
func (h *harness) badAggregateApply() {
	rm := h.mutation()
	n := len(rm.Mutations)
	var field string
	switch h.r.IntN(4) {
	case 0:
		rm.Mutations = append(rm.Mutations, cell.Set("s", []byte("q0"), 1000, []byte("v")))
		field = fmt.Sprintf("mutations[%d].set_cell.family_name", n)
	case 1:
		rm.Mutations = append(rm.Mutations, cell.Add("a", []byte("q0"), 1000, 1))
		field = fmt.Sprintf("mutations[%d].add_to_cell.family_name", n)
	case 2:
		rm.Mutations = append(rm.Mutations, cell.Merge("x", []byte("q0"), 1000, []byte{1, 2, 3}))
		field = fmt.Sprintf("mutations[%d].merge_to_cell.input", n)
	default:
		rm.Mutations = append(rm.Mutations, cell.Merge("h", []byte("q0"), 1000, []byte("not a sketch")))
		field = fmt.Sprintf("mutations[%d].merge_to_cell.input", n)
	}
	err := h.tabletFor(rm.Row).Apply(h.ctx, rm)
	var ia *cell.InvalidArgumentError
	if !errors.As(err, &ia) || ia.Field != field {
		h.fatalf("apply %+v: got %v, want an invalid argument naming %s", rm.Mutations[n], err, field)
	}
}

// TestModelAggregates runs the model with aggregate families (Sum, Min, Max,
// HLL++) written by AddToCell and MergeToCell among SetCells and deletes,
// interleaved with flushes, merging and major compactions, splits, reopens
// and crash recoveries.
func TestModelAggregates(t *testing.T) {
	seeds := []uint64{11, 12}
	ops := 8000
	if os.Getenv("TABULA_LONG") != "" {
		seeds = nil
		for s := uint64(11); s <= 30; s++ {
			seeds = append(seeds, s)
		}
		ops = 30_000
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			counts := runModelOn(t, seed, ops, false, blob.NewMemory(), true, true)
			t.Logf("seed %d: %d operations: %v", seed, ops, counts)
			for _, k := range []string{"apply", "flush", "major compaction", "split", "crash and recover", "invalid aggregate apply"} {
				if counts[k] == 0 {
					t.Errorf("no %q in the run: %v", k, counts)
				}
			}
		})
	}
}
