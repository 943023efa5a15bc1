package mapreduce

// Outputs: what an attempt writes (rowSink) and how the coordinator
// commits or aborts a file output.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tabuladb/tabula/rowfile"
	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/client"
)

// rowSink is an attempt's output.
type rowSink interface {
	write(ctx context.Context, row cell.Row) error
	// close finishes the attempt's output and returns what it wrote
	// (uncommitted file names).
	close(ctx context.Context) ([]string, error)
	// abort discards what an attempt that failed wrote (no-op after close).
	abort()
}

func (w *LocalWorker) openSink(ctx context.Context, job *Job, t Task, counters *attemptCounters) (rowSink, error) {
	switch out := job.Output.(type) {
	case nil:
		return &discardSink{counters: counters}, nil
	case *TableOutput:
		c, err := w.cfg.Clients(addrOr(out.Addr, t.Job.Addr))
		if err != nil {
			return nil, err
		}
		return &tableSink{c: c, table: t.Job.TableName(out.Table), ts: t.Job.Timestamp, counters: counters}, nil
	case *FileOutput:
		format, err := rowfile.ParseFormat(out.Format)
		if err != nil {
			return nil, err
		}
		tmp, err := rowfile.OpenLocation(ctx, tempLocation(out.URL, t.Job.ID))
		if err != nil {
			return nil, err
		}
		total := t.Job.Maps
		if t.Job.Reducers > 0 {
			total = t.Job.Reducers
		}
		name := t.Attempt.String() + "." + rowfile.ShardName(filePrefix, t.Attempt.Task, total, format.Ext())
		// Row groups of 32 MiB bound the writer's buffer (the default is 128 MiB).
		sw, err := tmp.CreateShard(ctx, name, rowfile.WriterOptions{Format: format, RowGroupBytes: 32 << 20})
		if err != nil {
			return nil, err
		}
		return &fileSink{w: sw, ts: t.Job.Timestamp, counters: counters}, nil
	}
	return nil, fmt.Errorf("unknown output type %T", job.Output)
}

// filePrefix names the output files: part-SSSSS-of-NNNNN.EXT.
const filePrefix = "part"

// resolveTimestamps replaces JobTimestamp with ts, in place.
func resolveTimestamps(row cell.Row, ts int64) {
	for i := range row.Cells {
		if row.Cells[i].Timestamp == JobTimestamp {
			row.Cells[i].Timestamp = ts
		}
	}
}

type discardSink struct{ counters *attemptCounters }

func (d *discardSink) write(_ context.Context, row cell.Row) error {
	d.counters.add(CounterOutputRows, 1)
	d.counters.add(CounterOutputCells, int64(len(row.Cells)))
	return nil
}
func (d *discardSink) close(context.Context) ([]string, error) { return nil, nil }
func (d *discardSink) abort()                                  {}

// tableSink batches rows into ApplyBulk calls of about batchBytes.
type tableSink struct {
	c        *client.Client
	table    string
	ts       int64
	counters *attemptCounters
	batch    []cell.RowMutation
	bytes    int
}

const tableBatchBytes = 4 << 20

func (s *tableSink) write(ctx context.Context, row cell.Row) error {
	if len(row.Cells) == 0 {
		return nil
	}
	// The batch outlives the call: the row's bytes are copied, since a
	// reducer may hand over the key the merge reuses for the next group.
	rm := cell.RowMutation{Row: bytes.Clone(row.Key), Mutations: make([]cell.Mutation, len(row.Cells))}
	for i, c := range row.Cells {
		ts := c.Timestamp
		if ts == JobTimestamp {
			ts = s.ts
		}
		rm.Mutations[i] = cell.Set(c.Family, bytes.Clone(c.Qualifier), ts, bytes.Clone(c.Value))
	}
	s.batch = append(s.batch, rm)
	n := rm.Size()
	s.bytes += n
	s.counters.add(CounterOutputRows, 1)
	s.counters.add(CounterOutputCells, int64(len(row.Cells)))
	s.counters.add(CounterOutputBytes, int64(n))
	if s.bytes >= tableBatchBytes || len(s.batch) >= 10000 {
		return s.flush(ctx)
	}
	return nil
}

func (s *tableSink) flush(ctx context.Context) error {
	if len(s.batch) == 0 {
		return nil
	}
	errs, err := s.c.ApplyBulk(ctx, s.table, s.batch, client.BulkOptions{})
	if err != nil {
		for i, e := range errs {
			if e != nil {
				return fmt.Errorf("write of row %q to %s: %w", s.batch[i].Row, s.table, e)
			}
		}
		return fmt.Errorf("write to %s: %w", s.table, err)
	}
	s.batch, s.bytes = s.batch[:0], 0
	return nil
}

func (s *tableSink) close(ctx context.Context) ([]string, error) { return nil, s.flush(ctx) }
func (s *tableSink) abort()                                      {}

// fileSink writes one shard under a temporary name.
type fileSink struct {
	w        *rowfile.ShardWriter
	ts       int64
	counters *attemptCounters
	closed   bool
}

func (s *fileSink) write(_ context.Context, row cell.Row) error {
	resolveTimestamps(row, s.ts)
	if err := s.w.Write(row); err != nil {
		return err
	}
	s.counters.add(CounterOutputRows, 1)
	s.counters.add(CounterOutputCells, int64(len(row.Cells)))
	return nil
}

func (s *fileSink) close(context.Context) ([]string, error) {
	s.closed = true
	if err := s.w.Commit(); err != nil {
		return nil, err
	}
	s.counters.add(CounterOutputBytes, s.w.Stats().Bytes)
	return []string{s.w.Name()}, nil
}

func (s *fileSink) abort() {
	if !s.closed {
		s.w.Abort()
	}
}

// tempLocation is where a job run's attempts write before commit:
// URL/_temporary/JOBID.
func tempLocation(desc, jobID string) string {
	return subLocation(desc, "_temporary", jobID)
}

func subLocation(desc string, parts ...string) string {
	if strings.Contains(desc, "://") {
		if u, err := url.Parse(desc); err == nil {
			if u.Scheme == "file" {
				u.Path = filepath.Join(append([]string{u.Path}, parts...)...)
			} else {
				u.Path = path.Join(append([]string{u.Path}, parts...)...)
			}
			return u.String()
		}
	}
	return filepath.Join(append([]string{desc}, parts...)...)
}

// localDir returns the directory of a local location description.
func localDir(desc string) (string, bool) {
	if !strings.Contains(desc, "://") {
		return desc, true
	}
	if u, err := url.Parse(desc); err == nil && u.Scheme == "file" {
		return u.Path, true
	}
	return "", false
}

// SuccessFile is written last into a file output's location by a
// committed job: its manifest (the files and the counters). A location
// without it holds no complete output.
const SuccessFile = "_SUCCESS"

// Manifest is the content of SuccessFile.
type Manifest struct {
	JobID    string   `json:"job_id"`
	Job      string   `json:"job"`
	Files    []string `json:"files"`
	Counters Counters `json:"counters"`
}

// checkFileOutput makes sure the output can be written and holds no
// earlier output that the new one would mix with; it writes nothing that
// stays.
func checkFileOutput(ctx context.Context, out *FileOutput, jobID string) error {
	if _, err := rowfile.ParseFormat(out.Format); err != nil {
		return err
	}
	if out.Format != "" && !strings.EqualFold(out.Format, "jsonl") && !strings.EqualFold(out.Format, "parquet") && !strings.EqualFold(out.Format, "json") && !strings.EqualFold(out.Format, "template") {
		return fmt.Errorf("output format %q: want jsonl or parquet", out.Format)
	}
	loc, err := rowfile.OpenLocation(ctx, out.URL)
	if err != nil {
		return fmt.Errorf("output %s: %w", out.URL, err)
	}
	names, err := loc.List(ctx)
	if err != nil {
		return fmt.Errorf("output %s: %w", out.URL, err)
	}
	for _, n := range names {
		if n == SuccessFile || strings.HasPrefix(n, filePrefix+"-") {
			return fmt.Errorf("output %s already holds %s: remove it or choose another", out.URL, n)
		}
	}
	tmp, err := rowfile.OpenLocation(ctx, tempLocation(out.URL, jobID))
	if err != nil {
		return fmt.Errorf("output %s is not writable: %w", out.URL, err)
	}
	w, err := tmp.Create(ctx, ".probe")
	if err != nil {
		return fmt.Errorf("output %s is not writable: %w", out.URL, err)
	}
	if _, err := w.Write([]byte("probe")); err != nil {
		w.Abort()
		return fmt.Errorf("output %s is not writable: %w", out.URL, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("output %s is not writable: %w", out.URL, err)
	}
	return nil
}

// commitFileOutput moves the committed attempts' files (temporary names
// under _temporary/JOBID) to their final names in task order, then writes
// the manifest, then removes the temporary directory. Local directories
// rename; object stores copy.
func commitFileOutput(ctx context.Context, out *FileOutput, m Manifest, attemptFiles []string) ([]string, error) {
	var final []string
	for _, tmpName := range attemptFiles {
		// ATTEMPT.part-SSSSS-of-NNNNN.EXT
		_, name, ok := strings.Cut(tmpName, ".")
		if !ok {
			return nil, fmt.Errorf("unexpected attempt file %q", tmpName)
		}
		if err := moveFile(ctx, out.URL, m.JobID, tmpName, name); err != nil {
			return nil, fmt.Errorf("commit of %s: %w", name, err)
		}
		final = append(final, name)
	}
	m.Files = final
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	loc, err := rowfile.OpenLocation(ctx, out.URL)
	if err != nil {
		return nil, err
	}
	w, err := loc.Create(ctx, SuccessFile)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(append(b, '\n')); err != nil {
		w.Abort()
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	abortFileOutput(ctx, out, m.JobID)
	return final, nil
}

func moveFile(ctx context.Context, desc, jobID, from, to string) error {
	if dir, ok := localDir(desc); ok {
		return os.Rename(filepath.Join(dir, "_temporary", jobID, from), filepath.Join(dir, to))
	}
	tmp, err := rowfile.OpenLocation(ctx, tempLocation(desc, jobID))
	if err != nil {
		return err
	}
	src, err := tmp.Open(ctx, from)
	if err != nil {
		return err
	}
	defer src.Close()
	loc, err := rowfile.OpenLocation(ctx, desc)
	if err != nil {
		return err
	}
	w, err := loc.Create(ctx, to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, io.NewSectionReader(src, 0, src.Size())); err != nil {
		w.Abort()
		return err
	}
	return w.Close()
}

// abortFileOutput removes the job run's temporary files.
func abortFileOutput(ctx context.Context, out *FileOutput, jobID string) {
	if dir, ok := localDir(out.URL); ok {
		os.RemoveAll(filepath.Join(dir, "_temporary", jobID))
		os.Remove(filepath.Join(dir, "_temporary")) // only if empty
		return
	}
	// An object store: delete the objects under _temporary/JOBID/.
	u, err := url.Parse(out.URL)
	if err != nil {
		return
	}
	prefix := strings.Trim(path.Join(u.Path, "_temporary", jobID), "/") + "/"
	u.Path, u.RawPath = "", ""
	store, err := blob.OpenURL(ctx, u.String())
	if err != nil {
		return
	}
	objs, err := store.List(ctx, prefix)
	if err != nil {
		return
	}
	for _, o := range objs {
		store.Delete(ctx, o.Name)
	}
}

// readFileSplit calls fn with each row of one input file.
func readFileSplit(ctx context.Context, in *FileInput, name string, fn func(cell.Row) error) error {
	loc, err := rowfile.OpenSource(ctx, in.URL)
	if err != nil {
		return err
	}
	format := rowfile.Parquet
	if strings.HasSuffix(name, "."+rowfile.JSONL.Ext()) {
		format = rowfile.JSONL
	}
	r, err := loc.OpenShard(ctx, name, rowfile.ReaderOptions{Format: format, Name: name})
	if err != nil {
		return err
	}
	defer r.Close()
	return rowfile.Each(r, fn)
}

// FileShards finds a file input's shard set (FileInput.Prefix says which)
// and opens a reader on each file, which checks its schema. The caller
// closes the readers.
func FileShards(ctx context.Context, in *FileInput) (loc *rowfile.Location, names []string, readers []rowfile.RowReader, err error) {
	loc, err = rowfile.OpenSource(ctx, in.URL)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("input %s: %w", in.URL, err)
	}
	all, err := loc.List(ctx)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("input %s: %w", in.URL, err)
	}
	prefixes := []string{in.Prefix}
	if in.Prefix == "" {
		prefixes = []string{filePrefix}
		var others []string
		for _, f := range []rowfile.Format{rowfile.Parquet, rowfile.JSONL} {
			for _, p := range rowfile.ShardPrefixes(all, f.Ext()) {
				if !slices.Contains(others, p) {
					others = append(others, p)
				}
			}
		}
		switch {
		case slices.Contains(others, filePrefix):
		case len(others) == 1:
			prefixes = others
		case len(others) > 1:
			return nil, nil, nil, fmt.Errorf("input %s: holds shard sets of several prefixes (%s): name one", in.URL, strings.Join(others, ", "))
		}
	}
	prefix := prefixes[0]
	var format rowfile.Format
	var errs []error
	for _, f := range []rowfile.Format{rowfile.Parquet, rowfile.JSONL} {
		n, err := rowfile.ListShards(all, prefix, f.Ext())
		if err == nil {
			names, format = n, f
			break
		}
		errs = append(errs, err)
	}
	if names == nil {
		return nil, nil, nil, fmt.Errorf("input %s: no complete set of %s-SSSSS-of-NNNNN.parquet or .jsonl files: %w", in.URL, prefix, errors.Join(errs...))
	}
	readers, err = loc.OpenShards(ctx, prefix, rowfile.ReaderOptions{Format: format})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("input %s: %w", in.URL, err)
	}
	return loc, names, readers, nil
}

// fileSplits lists a file input's shard set, checking every file's
// schema, one split per file.
func fileSplits(ctx context.Context, in *FileInput) ([]Split, error) {
	loc, names, readers, err := FileShards(ctx, in)
	if err != nil {
		return nil, err
	}
	for _, r := range readers {
		r.Close()
	}
	splits := make([]Split, len(names))
	for i, n := range names {
		splits[i] = Split{File: n}
		if o, err := loc.Open(ctx, n); err == nil {
			splits[i].EstimatedBytes = o.Size()
			o.Close()
		}
	}
	return splits, nil
}
