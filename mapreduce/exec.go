package mapreduce

// The worker side: one attempt of a map or reduce task, from input to
// shuffle or output.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/tabuladb/tabula/mapreduce/shuffle"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/client"
)

// attemptCounters are an attempt's counters, read by the progress reporter
// while the attempt adds to them.
type attemptCounters struct {
	mu sync.Mutex
	c  Counters
}

func (a *attemptCounters) add(name string, n int64) {
	a.mu.Lock()
	a.c[name] += n
	a.mu.Unlock()
}

func (a *attemptCounters) snapshot() Counters {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.c.Clone()
}

// reportProgress calls progress with the counters every interval until
// the returned stop is called.
func reportProgress(c *attemptCounters, progress func(Counters)) (stop func()) {
	if progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				progress(c.snapshot())
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

func (w *LocalWorker) execute(ctx context.Context, job *Job, t Task, progress func(Counters)) (TaskResult, error) {
	counters := &attemptCounters{c: Counters{}}
	stop := reportProgress(counters, progress)
	defer stop()
	dir := filepath.Join(w.jobDir(t.Job.ID), t.Attempt.String())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return TaskResult{}, err
	}
	var res TaskResult
	var err error
	if t.Attempt.Kind == MapTask {
		res, err = w.runMap(ctx, job, t, dir, counters)
	} else {
		res, err = w.runReduce(ctx, job, t, dir, counters)
	}
	if err != nil || t.Attempt.Kind == ReduceTask || t.Job.Reducers == 0 {
		os.RemoveAll(dir)
	}
	if err != nil {
		if ctx.Err() != nil {
			return TaskResult{}, fmt.Errorf("%s: %w (%v)", t.Attempt, ctx.Err(), err)
		}
		return TaskResult{}, fmt.Errorf("%s: %w", t.Attempt, err)
	}
	res.Counters = counters.snapshot()
	return res, nil
}

// mapContext is what Map writes to.
type mapContext struct {
	t        Task
	sorter   *shuffle.Sorter
	sink     rowSink
	counters *attemptCounters
	ctx      context.Context
	report   []byte
	clients  func(string) (*client.Client, error)
}

func (m *mapContext) Emit(key, value []byte) error {
	if m.sorter == nil {
		return errors.New("Emit in a map-only job (Reducers 0): use Write")
	}
	m.counters.add(CounterMapOutputRecords, 1)
	m.counters.add(CounterMapOutputBytes, int64(len(key)+len(value)))
	return m.sorter.Add(key, value)
}

func (m *mapContext) Write(row cell.Row) error {
	if m.sink == nil {
		return errors.New("Write in the map of a job with reducers: use Emit")
	}
	return m.sink.write(m.ctx, row)
}

func (m *mapContext) Count(name string, n int64) { m.counters.add(name, n) }
func (m *mapContext) Report(data []byte)         { m.report = data }
func (m *mapContext) Client(addr string) (*client.Client, error) {
	return m.clients(addrOr(addr, m.t.Job.Addr))
}
func (m *mapContext) Task() Task { return m.t }

// rowBytes is a row's payload size: key plus each cell's column and value.
func rowBytes(r cell.Row) int64 {
	n := int64(len(r.Key))
	for _, c := range r.Cells {
		n += int64(len(c.Family) + len(c.Qualifier) + len(c.Value) + 8)
	}
	return n
}

func (w *LocalWorker) runMap(ctx context.Context, job *Job, t Task, dir string, counters *attemptCounters) (TaskResult, error) {
	if t.Split == nil {
		return TaskResult{}, errors.New("map task without a split")
	}
	mc := &mapContext{t: t, counters: counters, ctx: ctx, clients: w.cfg.Clients}
	if t.Job.Reducers > 0 {
		part := job.Partition
		switch {
		case len(t.Job.PartitionBounds) > 0:
			part = TotalOrderPartitioner{Bounds: t.Job.PartitionBounds}
		case part == nil:
			part = HashPartitioner{}
		}
		n := t.Job.Reducers
		mc.sorter = shuffle.NewSorter(shuffle.SorterConfig{
			Dir: dir, Memory: w.cfg.SortMemory, Partitions: n,
			Partition: func(k []byte) int { return part.Partition(k, n) },
			Combine:   job.Combine,
		})
		defer mc.sorter.Close()
	} else {
		sink, err := w.openSink(ctx, job, t, counters)
		if err != nil {
			return TaskResult{}, err
		}
		defer sink.abort()
		mc.sink = sink
	}
	var maxTS int64
	var err error
	if job.MapSplit != nil {
		err = job.MapSplit(ctx, *t.Split, mc)
	} else {
		err = w.readSplit(ctx, job, t, func(row cell.Row) error {
			counters.add(CounterInputRows, 1)
			counters.add(CounterInputBytes, rowBytes(row))
			for _, c := range row.Cells {
				maxTS = max(maxTS, c.Timestamp)
			}
			return job.Map(ctx, row, mc)
		})
	}
	if err != nil {
		return TaskResult{}, err
	}
	if len(mc.report) > MaxReportBytes {
		return TaskResult{}, fmt.Errorf("report of %d bytes exceeds %d", len(mc.report), MaxReportBytes)
	}
	res := TaskResult{MaxInputTimestamp: maxTS, Report: mc.report}
	if mc.sorter != nil {
		sizes, err := mc.sorter.Finish()
		if err != nil {
			return TaskResult{}, err
		}
		st := mc.sorter.Stats()
		counters.add(CounterSpilledRecords, st.SpilledRecords)
		counters.add(CounterSpilledBytes, st.SpilledBytes)
		counters.add(CounterCombineIn, st.CombineIn)
		counters.add(CounterCombineOut, st.CombineOut)
		res.PartitionBytes = sizes
		w.mu.Lock()
		select {
		case <-w.lost:
		default:
			w.outputs[t.Attempt] = dir
		}
		w.mu.Unlock()
		return res, nil
	}
	if res.Output, err = mc.sink.close(ctx); err != nil {
		return TaskResult{}, err
	}
	return res, nil
}

// readSplit calls fn with each row of the split.
func (w *LocalWorker) readSplit(ctx context.Context, job *Job, t Task, fn func(cell.Row) error) error {
	switch in := job.Input.(type) {
	case *TableInput:
		c, err := w.cfg.Clients(addrOr(in.Addr, t.Job.Addr))
		if err != nil {
			return err
		}
		opts := scanOptions(in, t.Job.ReadTime)
		opts.Start, opts.End = t.Split.Start, t.Split.End
		if in.Script != "" {
			var ferr error
			sopts := client.ScriptOptions{Name: "filter", Start: opts.Start, End: opts.End, Filter: client.FilterOf(opts)}
			_, err := c.FilterRows(ctx, t.Job.TableName(t.Split.Table), in.Script, sopts, func(r client.Row) bool {
				row := cell.Row{Key: r.Key, Cells: make([]cell.Cell, len(r.Cells))}
				for i, c := range r.Cells {
					row.Cells[i] = c.Cell
				}
				ferr = fn(row)
				return ferr == nil
			})
			if ferr != nil {
				return ferr
			}
			return err
		}
		s := c.Scan(ctx, t.Job.TableName(t.Split.Table), opts)
		defer s.Close()
		for s.Next() {
			if err := fn(s.Row()); err != nil {
				return err
			}
		}
		return s.Err()
	case *FileInput:
		return readFileSplit(ctx, in, t.Split.File, fn)
	}
	return fmt.Errorf("unknown input type %T", job.Input)
}

// scanOptions is the scan of a table input, bounded to the job's read
// time (timestamps ≤ readTime) unless the input asks otherwise.
func scanOptions(in *TableInput, readTime int64) client.ScanOptions {
	opts := client.ScanOptions{Families: in.Families, MaxVersions: in.MaxVersions, StartTime: in.StartTime, EndTime: in.EndTime, Filter: in.Filter}
	if opts.EndTime == 0 && readTime > 0 && !in.NoReadTime {
		opts.EndTime = readTime + 1
	}
	return opts
}

func addrOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// reduceContext is what Reduce writes to.
type reduceContext struct {
	t        Task
	sink     rowSink
	counters *attemptCounters
	ctx      context.Context
	report   []byte
}

func (r *reduceContext) Write(row cell.Row) error   { return r.sink.write(r.ctx, row) }
func (r *reduceContext) Count(name string, n int64) { r.counters.add(name, n) }
func (r *reduceContext) Report(data []byte)         { r.report = data }
func (r *reduceContext) Task() Task                 { return r.t }

func (w *LocalWorker) runReduce(ctx context.Context, job *Job, t Task, dir string, counters *attemptCounters) (TaskResult, error) {
	if job.Reduce == nil {
		return TaskResult{}, errors.New("reduce task of a job without Reduce")
	}
	// Copy every map's partition to local disk first (a few at a time): a
	// map output lost mid-merge would otherwise fail the attempt late.
	files := make([]string, len(t.MapOutputs))
	fetchErrs := make([]error, len(t.MapOutputs))
	sem := make(chan struct{}, fetchParallelism)
	var wg sync.WaitGroup
	for i, loc := range t.MapOutputs {
		files[i] = filepath.Join(dir, fmt.Sprintf("in-%05d", loc.Map))
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			n, err := w.fetch(ctx, loc, t.Partition, files[i])
			if err != nil {
				fetchErrs[i] = &FetchError{Map: loc.Map, Worker: loc.Worker, Err: err}
				return
			}
			counters.add(CounterShuffleBytes, n)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return TaskResult{}, err
	}
	for _, err := range fetchErrs {
		if err != nil {
			return TaskResult{}, err
		}
	}
	files, err := shuffle.MergeFiles(dir, files, 64)
	if err != nil {
		return TaskResult{}, err
	}
	var srcs []io.Reader
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return TaskResult{}, err
		}
		defer fh.Close()
		srcs = append(srcs, fh)
	}
	sink, err := w.openSink(ctx, job, t, counters)
	if err != nil {
		return TaskResult{}, err
	}
	defer sink.abort()
	rc := &reduceContext{t: t, sink: sink, counters: counters, ctx: ctx}
	err = shuffle.Group(shuffle.NewMerger(srcs), func(key []byte, values iter.Seq[[]byte]) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		counters.add(CounterReduceGroups, 1)
		counted := func(yield func([]byte) bool) {
			for v := range values {
				counters.add(CounterReduceInput, 1)
				if !yield(v) {
					return
				}
			}
		}
		return job.Reduce(ctx, key, counted, rc)
	})
	if err != nil {
		return TaskResult{}, err
	}
	if len(rc.report) > MaxReportBytes {
		return TaskResult{}, fmt.Errorf("report of %d bytes exceeds %d", len(rc.report), MaxReportBytes)
	}
	out, err := sink.close(ctx)
	if err != nil {
		return TaskResult{}, err
	}
	return TaskResult{Output: out, Report: rc.report}, nil
}

// fetchParallelism bounds a reduce attempt's concurrent fetches.
const fetchParallelism = 4

// fetch copies one map output partition to path and returns its size.
func (w *LocalWorker) fetch(ctx context.Context, loc MapOutputLocation, partition int, path string) (int64, error) {
	var rc io.ReadCloser
	var err error
	if loc.Worker == w.cfg.Name || w.cfg.Fetcher == nil {
		rc, err = w.FetchPartition(ctx, loc.Attempt, partition)
	} else {
		rc, err = w.cfg.Fetcher.Fetch(ctx, loc.Worker, loc.Attempt, partition)
	}
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, rc)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return n, err
}
