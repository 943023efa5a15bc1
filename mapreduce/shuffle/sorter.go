package shuffle

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"path/filepath"
	"slices"
)

// SorterConfig configures NewSorter.
type SorterConfig struct {
	// Dir receives the spill runs and the partition files (it must exist;
	// the Sorter owns the files it creates there).
	Dir string
	// Memory bounds the buffer of records (keys, values and their index)
	// before a spill; default 64 MiB, at least 64 KiB.
	Memory int64
	// Partitions is the number of reduce partitions (≥ 1); Partition
	// assigns a key to one of them (nil: all to 0).
	Partitions int
	Partition  func(key []byte) int
	// Combine, optional, is applied to each key's values when a spill is
	// written and when runs are merged.
	Combine func(key []byte, values iter.Seq[[]byte], emit func(value []byte) error) error
	// MergeFactor is the most runs merged at once; more runs are merged in
	// passes. Default 64.
	MergeFactor int
}

// Stats count a Sorter's work.
type Stats struct {
	// Records and Bytes are what Add took (encoded size).
	Records, Bytes int64
	// SpilledRecords and SpilledBytes are what went to spill runs before
	// the final merge (0 when everything fit in memory); Runs counts them.
	SpilledRecords, SpilledBytes int64
	Runs                         int
	// CombineIn and CombineOut count the combiner's input and output
	// records.
	CombineIn, CombineOut int64
	// OutputRecords and OutputBytes are what the partition files hold.
	OutputRecords, OutputBytes int64
	// PeakMemory is the largest the buffer's accounted memory got.
	PeakMemory int64
}

// entry indexes one buffered record: partition, then where its key and
// value are in the chunks.
type entry struct {
	part       uint32
	chunk      uint32
	off        uint32
	klen, vlen uint32
}

const entrySize = 20

// Sorter is the map side of the shuffle: Add buffers records; when the
// buffer reaches its memory budget they are sorted by (partition, key),
// combined and written as a run; Finish merges the runs into one sorted
// file per partition (PartitionFile). Not safe for concurrent use.
type Sorter struct {
	cfg       SorterConfig
	chunkSize int
	chunks    [][]byte // chunks[i][:len] is used
	entries   []entry
	mem       int64
	runs      []run
	stats     Stats
	finished  bool
}

// run is a spill file: records sorted by (partition, key), partition p at
// [offsets[p], offsets[p+1]).
type run struct {
	path    string
	offsets []int64
}

// PartitionFile is the name of partition p's file under dir.
func PartitionFile(dir string, p int) string {
	return filepath.Join(dir, fmt.Sprintf("part-%05d", p))
}

// NewSorter returns a Sorter configured by cfg.
func NewSorter(cfg SorterConfig) *Sorter {
	if cfg.Memory <= 0 {
		cfg.Memory = 64 << 20
	}
	cfg.Memory = max(cfg.Memory, 64<<10)
	if cfg.Partitions < 1 {
		cfg.Partitions = 1
	}
	if cfg.MergeFactor < 2 {
		cfg.MergeFactor = 64
	}
	return &Sorter{cfg: cfg, chunkSize: int(min(1<<20, cfg.Memory/16))}
}

// Add buffers one record (copying key and value), spilling first when the
// buffer would exceed the budget.
func (s *Sorter) Add(key, value []byte) error {
	if s.finished {
		return errors.New("shuffle: Add after Finish")
	}
	p := 0
	if s.cfg.Partition != nil {
		p = s.cfg.Partition(key)
		if p < 0 || p >= s.cfg.Partitions {
			return fmt.Errorf("shuffle: partition %d of key %q out of [0, %d)", p, key, s.cfg.Partitions)
		}
	}
	if len(key) > MaxRecordPart || len(value) > MaxRecordPart {
		return fmt.Errorf("shuffle: record of %d+%d bytes exceeds %d", len(key), len(value), MaxRecordPart)
	}
	n := len(key) + len(value)
	s.stats.Records++
	s.stats.Bytes += int64(RecordSize(key, value))
	if len(s.entries) > 0 && s.mem+s.growth(n) > s.cfg.Memory {
		if err := s.spill(); err != nil {
			return err
		}
	}
	ci, off := s.place(n)
	c := s.chunks[ci]
	c = append(c, key...)
	c = append(c, value...)
	s.chunks[ci] = c
	if len(s.entries) == cap(s.entries) {
		s.mem -= int64(cap(s.entries)) * entrySize
		s.entries = slices.Grow(s.entries, max(1024, cap(s.entries)))
		s.mem += int64(cap(s.entries)) * entrySize
	}
	s.entries = append(s.entries, entry{part: uint32(p), chunk: uint32(ci), off: uint32(off), klen: uint32(len(key)), vlen: uint32(len(value))})
	s.stats.PeakMemory = max(s.stats.PeakMemory, s.mem)
	return nil
}

// growth is the memory adding a record of n bytes would take.
func (s *Sorter) growth(n int) int64 {
	var g int64
	if last := len(s.chunks) - 1; last < 0 || cap(s.chunks[last])-len(s.chunks[last]) < n {
		g += int64(max(n, s.chunkSize))
	}
	if len(s.entries) == cap(s.entries) {
		g += int64(max(1024, cap(s.entries))) * entrySize
	}
	return g
}

// place returns the chunk with room for n bytes and where they go.
func (s *Sorter) place(n int) (int, int) {
	if last := len(s.chunks) - 1; last >= 0 && cap(s.chunks[last])-len(s.chunks[last]) >= n {
		return last, len(s.chunks[last])
	}
	size := max(n, s.chunkSize)
	s.chunks = append(s.chunks, make([]byte, 0, size))
	s.mem += int64(size)
	return len(s.chunks) - 1, 0
}

func (s *Sorter) key(e entry) []byte {
	return s.chunks[e.chunk][e.off : e.off+e.klen]
}

func (s *Sorter) value(e entry) []byte {
	return s.chunks[e.chunk][e.off+e.klen : e.off+e.klen+e.vlen]
}

func (s *Sorter) sortBuffer() {
	slices.SortStableFunc(s.entries, func(a, b entry) int {
		if a.part != b.part {
			return int(a.part) - int(b.part)
		}
		return bytes.Compare(s.key(a), s.key(b))
	})
}

// writeBuffer writes the sorted buffer, partition by partition, calling
// startPart before each partition's records; it combines when configured.
func (s *Sorter) writeBuffer(startPart func(p int) (*Writer, error)) error {
	i := 0
	for p := 0; p < s.cfg.Partitions; p++ {
		w, err := startPart(p)
		if err != nil {
			return err
		}
		for i < len(s.entries) && int(s.entries[i].part) == p {
			j := i + 1
			k := s.key(s.entries[i])
			for j < len(s.entries) && int(s.entries[j].part) == p && bytes.Equal(s.key(s.entries[j]), k) {
				j++
			}
			group := s.entries[i:j]
			if s.cfg.Combine == nil {
				for _, e := range group {
					if err := w.Write(k, s.value(e)); err != nil {
						return err
					}
				}
			} else if err := s.combine(w, k, func(yield func([]byte) bool) {
				for _, e := range group {
					if !yield(s.value(e)) {
						return
					}
				}
			}); err != nil {
				return err
			}
			i = j
		}
	}
	return nil
}

func (s *Sorter) combine(w *Writer, key []byte, values iter.Seq[[]byte]) error {
	counted := func(yield func([]byte) bool) {
		for v := range values {
			s.stats.CombineIn++
			if !yield(v) {
				return
			}
		}
	}
	return s.cfg.Combine(key, counted, func(v []byte) error {
		s.stats.CombineOut++
		return w.Write(key, v)
	})
}

// spill writes the buffer as a run and empties it.
func (s *Sorter) spill() error {
	s.sortBuffer()
	path := filepath.Join(s.cfg.Dir, fmt.Sprintf("spill-%05d", len(s.runs)))
	r, err := s.writeRun(path, func(startPart func(int) (*Writer, error)) error { return s.writeBuffer(startPart) })
	if err != nil {
		return err
	}
	s.runs = append(s.runs, r)
	s.resetBuffer()
	return nil
}

// writeRun creates a run file at path with the records fill writes.
func (s *Sorter) writeRun(path string, fill func(startPart func(int) (*Writer, error)) error) (run, error) {
	f, err := os.Create(path)
	if err != nil {
		return run{}, err
	}
	defer f.Close()
	w := NewWriter(f)
	r := run{path: path, offsets: make([]int64, s.cfg.Partitions+1)}
	err = fill(func(p int) (*Writer, error) {
		r.offsets[p] = w.Bytes
		return w, nil
	})
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		os.Remove(path)
		return run{}, fmt.Errorf("shuffle: spill %s: %w", path, err)
	}
	r.offsets[s.cfg.Partitions] = w.Bytes
	s.stats.SpilledRecords += w.Records
	s.stats.SpilledBytes += w.Bytes
	s.stats.Runs++
	return r, nil
}

// resetBuffer empties the buffer, keeping one chunk of the usual size for
// reuse (oversized chunks of large records are dropped).
func (s *Sorter) resetBuffer() {
	var keep [][]byte
	s.mem = int64(cap(s.entries)) * entrySize
	for _, c := range s.chunks {
		if cap(c) == s.chunkSize && len(keep) == 0 {
			keep = append(keep, c[:0])
			s.mem += int64(cap(c))
		}
	}
	s.chunks = keep
	s.entries = s.entries[:0]
}

// Finish sorts what is buffered and writes one file per partition
// (PartitionFile(Dir, p)), merging the spilled runs; it returns each
// partition file's size. The runs are removed.
func (s *Sorter) Finish() ([]int64, error) {
	if s.finished {
		return nil, errors.New("shuffle: Finish called twice")
	}
	s.finished = true
	defer s.removeRuns()
	sizes := make([]int64, s.cfg.Partitions)
	if len(s.runs) == 0 {
		s.sortBuffer()
		var f *os.File
		var w *Writer
		closePart := func() error {
			if f == nil {
				return nil
			}
			err := w.Flush()
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			s.stats.OutputRecords += w.Records
			s.stats.OutputBytes += w.Bytes
			return err
		}
		err := s.writeBuffer(func(p int) (*Writer, error) {
			if err := closePart(); err != nil {
				return nil, err
			}
			var err error
			if f, err = os.Create(PartitionFile(s.cfg.Dir, p)); err != nil {
				return nil, err
			}
			w = NewWriter(f)
			sizes[p] = 0
			return w, nil
		})
		if err == nil {
			err = closePart()
		}
		if err != nil {
			return nil, fmt.Errorf("shuffle: map output: %w", err)
		}
		for p := range sizes {
			st, err := os.Stat(PartitionFile(s.cfg.Dir, p))
			if err != nil {
				return nil, err
			}
			sizes[p] = st.Size()
		}
		s.releaseBuffer()
		return sizes, nil
	}
	if len(s.entries) > 0 {
		if err := s.spill(); err != nil {
			return nil, err
		}
	}
	s.releaseBuffer()
	// Merge in passes until at most MergeFactor runs remain.
	for len(s.runs) > s.cfg.MergeFactor {
		group := s.runs[:s.cfg.MergeFactor]
		path := filepath.Join(s.cfg.Dir, fmt.Sprintf("spill-%05d", s.stats.Runs))
		r, err := s.writeRun(path, func(startPart func(int) (*Writer, error)) error {
			for p := 0; p < s.cfg.Partitions; p++ {
				w, err := startPart(p)
				if err != nil {
					return err
				}
				if err := s.mergePartition(group, p, w); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		for _, old := range group {
			os.Remove(old.path)
		}
		s.runs = append(slices.Clone(s.runs[s.cfg.MergeFactor:]), r)
	}
	for p := 0; p < s.cfg.Partitions; p++ {
		f, err := os.Create(PartitionFile(s.cfg.Dir, p))
		if err != nil {
			return nil, fmt.Errorf("shuffle: map output: %w", err)
		}
		w := NewWriter(f)
		err = s.mergePartition(s.runs, p, w)
		if err == nil {
			err = w.Flush()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("shuffle: merge of partition %d: %w", p, err)
		}
		s.stats.OutputRecords += w.Records
		s.stats.OutputBytes += w.Bytes
		sizes[p] = w.Bytes
	}
	return sizes, nil
}

// mergePartition merges partition p of runs into w, combining.
func (s *Sorter) mergePartition(runs []run, p int, w *Writer) error {
	var srcs []io.Reader
	for _, r := range runs {
		f, err := os.Open(r.path)
		if err != nil {
			return err
		}
		defer f.Close()
		srcs = append(srcs, io.NewSectionReader(f, r.offsets[p], r.offsets[p+1]-r.offsets[p]))
	}
	m := NewMerger(srcs)
	if s.cfg.Combine == nil {
		for m.Next() {
			if err := w.Write(m.Key(), m.Value()); err != nil {
				return err
			}
		}
		return m.Err()
	}
	return Group(m, func(key []byte, values iter.Seq[[]byte]) error { return s.combine(w, key, values) })
}

func (s *Sorter) releaseBuffer() {
	s.chunks, s.entries, s.mem = nil, nil, 0
}

func (s *Sorter) removeRuns() {
	for _, r := range s.runs {
		os.Remove(r.path)
	}
	s.runs = nil
}

// Close removes the runs of a Sorter that did not finish (an attempt that
// failed); the partition files Finish wrote are the caller's.
func (s *Sorter) Close() {
	s.removeRuns()
	s.releaseBuffer()
}

// Stats returns the counts so far.
func (s *Sorter) Stats() Stats { return s.stats }
