package mapreduce_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tabuladb/tabula/internal/devtest"
	"github.com/tabuladb/tabula/mapreduce"
	"github.com/tabuladb/tabula/storage/cell"
)

var words = strings.Fields("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon phi chi psi omega news sports cnn home")

// loadAnchors writes rows row00000… with 0–5 anchor cells of a few words
// each, through the official client, and returns the word counts.
func loadAnchors(t testing.TB, e *env, table string, rows int) map[string]int64 {
	t.Helper()
	tbl := e.Data.Open(table)
	r := rand.New(rand.NewPCG(uint64(rows), 3))
	want := map[string]int64{}
	var keys []string
	var muts []*bigtable.Mutation
	flush := func() {
		errs, err := tbl.ApplyBulk(e.ctx, keys, muts)
		if err != nil || errs != nil {
			t.Fatal(err, errs)
		}
		keys, muts = nil, nil
	}
	for i := range rows {
		m := bigtable.NewMutation()
		n := r.IntN(6)
		for a := range n {
			var text []string
			for range 1 + r.IntN(4) {
				w := words[r.IntN(len(words))]
				text = append(text, w)
				want[w]++
			}
			m.Set("anchor", fmt.Sprintf("site%d.com", a), bigtable.Timestamp(1_000_000+int64(i)*1000), []byte(strings.Join(text, " ")))
		}
		m.Set("contents", "", bigtable.Timestamp(1_000_000), []byte("<html>"))
		keys = append(keys, fmt.Sprintf("row%05d", i))
		muts = append(muts, m)
		if len(keys) == 500 {
			flush()
		}
	}
	if len(keys) > 0 {
		flush()
	}
	return want
}

// wordCountConf is the test word count's configuration.
type wordCountConf struct {
	Table, Out string
	Reducers   int
	// FailMap makes every attempt of that map fail; SlowMap makes the
	// first attempt of that map hang until killed; KillAt kills a worker
	// when that map starts (see killHook).
	FailMap, SlowMap, KillAt int
}

// killHook is what KillAt calls (set by the test).
var killHook atomic.Pointer[func()]

func init() {
	mapreduce.Register("test-wordcount", "TABLE: anchor word count (test)", func(conf []byte) (*mapreduce.Job, error) {
		var c wordCountConf
		if _, err := fmt.Sscanf(string(conf), "%s %s %d %d %d %d", &c.Table, &c.Out, &c.Reducers, &c.FailMap, &c.SlowMap, &c.KillAt); err != nil {
			return nil, err
		}
		return wordCountJob(c), nil
	})
}

func (c wordCountConf) bytes() []byte {
	return fmt.Appendf(nil, "%s %s %d %d %d %d", c.Table, c.Out, c.Reducers, c.FailMap, c.SlowMap, c.KillAt)
}

func wordCountJob(c wordCountConf) *mapreduce.Job {
	sum := mapreduce.TypedCombine(mapreduce.String, mapreduce.Int64, func(_ string, vs iter.Seq[int64], emit func(int64) error) error {
		var n int64
		for v := range vs {
			n += v
		}
		return emit(n)
	})
	var out mapreduce.Output
	if c.Out != "-" {
		out = &mapreduce.TableOutput{Table: c.Out}
	}
	return &mapreduce.Job{
		Input: &mapreduce.TableInput{Table: c.Table, Families: []string{"anchor"}, SplitBytes: 1 << 30},
		Map: mapreduce.TypedMap(mapreduce.String, mapreduce.Int64, func(ctx context.Context, row cell.Row, emit func(string, int64) error, out mapreduce.MapContext) error {
			a := out.Task().Attempt
			if a.Task == c.FailMap {
				return fmt.Errorf("deliberate failure of row %s", row.Key)
			}
			if a.Task == c.SlowMap && a.Attempt == 0 {
				<-ctx.Done()
				// A straggler slow to stop, too: it reports its
				// kill after the job has ended.
				time.Sleep(100 * time.Millisecond)
				return ctx.Err()
			}
			if a.Task == c.KillAt {
				if f := killHook.Load(); f != nil {
					(*f)()
				}
			}
			for _, cl := range row.Cells {
				for _, w := range strings.Fields(string(cl.Value)) {
					if err := emit(w, 1); err != nil {
						return err
					}
				}
			}
			return nil
		}),
		Combine:  sum,
		Reducers: c.Reducers,
		Reduce: mapreduce.TypedReduce(mapreduce.String, mapreduce.Int64, func(_ context.Context, w string, vs iter.Seq[int64], out mapreduce.ReduceContext) error {
			var n int64
			for v := range vs {
				n += v
			}
			return out.Write(cell.Row{Key: []byte(w), Cells: []cell.Cell{{Family: "count", Qualifier: []byte("n"), Timestamp: mapreduce.JobTimestamp, Value: binary.BigEndian.AppendUint64(nil, uint64(n))}}})
		}),
		Output: out,
	}
}

func runWordCount(t *testing.T, e *env, c wordCountConf, cfg mapreduce.Config) (*mapreduce.Result, error) {
	t.Helper()
	job, err := mapreduce.Build("test-wordcount", c.bytes())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = e.Addr
	if cfg.TempDir == "" {
		cfg.TempDir = t.TempDir()
	}
	return mapreduce.Run(e.ctx, job, cfg)
}

// readCounts reads a word count output table through the official client.
func readCounts(t *testing.T, e *env, table string) map[string]int64 {
	t.Helper()
	got := map[string]int64{}
	err := e.Data.Open(table).ReadRows(e.ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		for _, it := range r["count"] {
			got[r.Key()] = int64(binary.BigEndian.Uint64(it.Value))
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

const anchorRows = 3000

func anchorsEnv(t *testing.T) (*env, map[string]int64) {
	e := startEnv(t)
	e.CreateTable(t, "web", []string{"anchor", "contents"}, devtest.SplitKeys(anchorRows, 9)...)
	return e, loadAnchors(t, e, "web", anchorRows)
}

// TestWordCount: a word count with a combiner over 9 tablets equals the
// count made through the official client; counters add up; re-running it
// leaves the output table byte-identical (cells and timestamps).
func TestWordCount(t *testing.T) {
	e, want := anchorsEnv(t)
	e.CreateTable(t, "counts", []string{"count"})
	reg := prometheus.NewRegistry()
	metrics := mapreduce.NewMetrics(reg)
	res, err := runWordCount(t, e, wordCountConf{Table: "web", Out: "counts", Reducers: 3, FailMap: -1, SlowMap: -1, KillAt: -1}, mapreduce.Config{LocalWorkers: 3, Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	if n := metricValue(t, reg, "tabula_mr_jobs_total", "test-wordcount", "succeeded"); n != 1 {
		t.Errorf("jobs metric %v, want 1", n)
	}
	if n := metricValue(t, reg, "tabula_mr_attempts_total", "reduce", "succeeded"); n != 3 {
		t.Errorf("reduce attempts metric %v, want 3", n)
	}
	if n := metricValue(t, reg, "tabula_mr_counter_total", mapreduce.CounterReduceGroups); n != float64(len(want)) {
		t.Errorf("reduce groups metric %v, want %d", n, len(want))
	}
	got := readCounts(t, e, "counts")
	if len(got) != len(want) {
		t.Errorf("%d words, want %d", len(got), len(want))
	}
	var total int64
	for w, n := range want {
		total += n
		if got[w] != n {
			t.Errorf("%s = %d, want %d", w, got[w], n)
		}
	}
	c := res.Counters
	if c[mapreduce.CounterMapOutputRecords] != total || c[mapreduce.CounterReduceGroups] != int64(len(want)) || c[mapreduce.CounterOutputRows] != int64(len(want)) {
		t.Errorf("counters %v: want %d map output records, %d groups and output rows", c, total, len(want))
	}
	if c[mapreduce.CounterInputRows] == 0 || c[mapreduce.CounterInputRows] > anchorRows || c[mapreduce.CounterCombineOut] >= c[mapreduce.CounterCombineIn] {
		t.Errorf("counters %v: want input rows in (0, %d], combine out < in", c, anchorRows)
	}
	first := e.CellDump(t, "counts")
	if _, err := runWordCount(t, e, wordCountConf{Table: "web", Out: "counts", Reducers: 2, FailMap: -1, SlowMap: -1, KillAt: -1}, mapreduce.Config{LocalWorkers: 2}); err != nil {
		t.Fatal(err)
	}
	if second := e.CellDump(t, "counts"); !slices.Equal(first, second) {
		t.Errorf("re-run changed the table: %d cells before, %d after", len(first), len(second))
	}
}

// TestTaskFailsJob: a map that always fails fails the job after 4
// attempts, naming the task and its error, with nothing written.
func TestTaskFailsJob(t *testing.T) {
	e, _ := anchorsEnv(t)
	e.CreateTable(t, "counts", []string{"count"})
	res, err := runWordCount(t, e, wordCountConf{Table: "web", Out: "counts", Reducers: 2, FailMap: 4, SlowMap: -1, KillAt: -1}, mapreduce.Config{LocalWorkers: 3})
	if err == nil {
		t.Fatal("job succeeded")
	}
	for _, s := range []string{"map 4 failed 4 times", "deliberate failure of row"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	if res.Counters[mapreduce.CounterFailedAttempts] != 4 {
		t.Errorf("failed attempts %d, want 4", res.Counters[mapreduce.CounterFailedAttempts])
	}
	if cells := e.CellDump(t, "counts"); len(cells) != 0 {
		t.Errorf("a failed job wrote %d cells", len(cells))
	}
}

// TestSlowTaskGetsBackup: a map whose first attempt hangs gets a backup
// attempt that wins; the output equals an undisturbed run's. The
// straggler reports its kill only after the job ended, and the job's
// counters count it.
func TestSlowTaskGetsBackup(t *testing.T) {
	e, want := anchorsEnv(t)
	e.CreateTable(t, "counts", []string{"count"})
	res, err := runWordCount(t, e, wordCountConf{Table: "web", Out: "counts", Reducers: 2, FailMap: -1, SlowMap: 7, KillAt: -1},
		mapreduce.Config{LocalWorkers: 3, BackupAfter: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Counters[mapreduce.CounterSpeculativeStarts] < 1 || res.Counters[mapreduce.CounterKilledAttempts] < 1 {
		t.Errorf("counters %v: want a backup started and the straggler killed", res.Counters)
	}
	got := readCounts(t, e, "counts")
	for w, n := range want {
		if got[w] != n {
			t.Errorf("%s = %d, want %d", w, got[w], n)
		}
	}
}

// TestLostWorker: killing a worker in the middle of the map phase re-runs
// its tasks (and map outputs) elsewhere; the output table is identical to
// an undisturbed run's.
func TestLostWorker(t *testing.T) {
	e, _ := anchorsEnv(t)
	e.CreateTable(t, "counts", []string{"count"})
	e.CreateTable(t, "counts2", []string{"count"})
	if _, err := runWordCount(t, e, wordCountConf{Table: "web", Out: "counts", Reducers: 2, FailMap: -1, SlowMap: -1, KillAt: -1}, mapreduce.Config{LocalWorkers: 3}); err != nil {
		t.Fatal(err)
	}
	workers := mapreduce.NewLocalWorkers(3, mapreduce.LocalWorkerConfig{Dir: t.TempDir(), SortMemory: 1 << 20})
	var once sync.Once
	kill := func() { once.Do(workers[0].Kill) }
	killHook.Store(&kill)
	defer killHook.Store(nil)
	var ws []mapreduce.Worker
	for _, w := range workers {
		ws = append(ws, w)
	}
	res, err := runWordCount(t, e, wordCountConf{Table: "web", Out: "counts2", Reducers: 2, FailMap: -1, SlowMap: -1, KillAt: 6}, mapreduce.Config{Workers: ws})
	if err != nil {
		t.Fatal(err)
	}
	if res.Counters[mapreduce.CounterMapAttempts] <= 9 || res.Counters[mapreduce.CounterFailedAttempts] != 0 {
		t.Errorf("counters %v: want more than 9 map attempts (the lost worker's re-run), none counted failed", res.Counters)
	}
	select {
	case <-workers[0].Lost():
	default:
		t.Fatal("the worker was not killed")
	}
	a, b := e.CellDump(t, "counts"), e.CellDump(t, "counts2")
	if len(a) == 0 || !slices.Equal(a, b) {
		t.Errorf("output after a lost worker differs: %d cells vs %d undisturbed", len(b), len(a))
	}
}

// TestUnknownInputTable: a missing table fails before any task.
func TestUnknownInputTable(t *testing.T) {
	e := startEnv(t)
	_, err := runWordCount(t, e, wordCountConf{Table: "nope", Out: "-", Reducers: 1, FailMap: -1, SlowMap: -1, KillAt: -1}, mapreduce.Config{})
	if err == nil || !strings.Contains(err.Error(), `"nope" not found`) {
		t.Fatalf("err = %v, want table not found", err)
	}
}

// TestSpillBoundedMemory: a shuffle more than 10× the sort memory budget
// spills, produces every record in sorted order at the reducer, and the
// process's peak heap (sampled, with the GC kept tight) stays under the
// budget plus a constant.
func TestSpillBoundedMemory(t *testing.T) {
	const budget = 2 << 20
	// The constant: the dev server's and clients' working memory while
	// scanning, the reduce's merge buffers and the sampling's slack.
	const slack = 24 << 20
	e := startEnv(t)
	e.CreateTable(t, "big", []string{"f"})
	tbl := e.Data.Open("big")
	var keys []string
	var muts []*bigtable.Mutation
	for i := range 400 {
		m := bigtable.NewMutation()
		m.Set("f", "q", 1000, []byte(fmt.Sprint(i)))
		keys, muts = append(keys, fmt.Sprintf("r%04d", i)), append(muts, m)
	}
	if errs, err := tbl.ApplyBulk(e.ctx, keys, muts); err != nil || errs != nil {
		t.Fatal(err, errs)
	}
	var violations, values atomic.Int64
	job := &mapreduce.Job{
		Input: &mapreduce.TableInput{Table: "big"},
		// Each row emits 200 records of ~600 bytes: ~48 MB in all.
		Map: func(_ context.Context, row cell.Row, out mapreduce.MapContext) error {
			r := rand.New(rand.NewPCG(uint64(len(row.Key)), binary.BigEndian.Uint64(append(make([]byte, 8-min(8, len(row.Key))), row.Key[:min(8, len(row.Key))]...))))
			v := make([]byte, 500)
			for range 200 {
				for i := range v {
					v[i] = byte('a' + r.IntN(26))
				}
				if err := out.Emit(fmt.Appendf(nil, "k%08d", r.IntN(1_000_000)), v); err != nil {
					return err
				}
			}
			return nil
		},
		Reducers: 1,
		Reduce: func() func(context.Context, []byte, iter.Seq[[]byte], mapreduce.ReduceContext) error {
			var last []byte
			return func(_ context.Context, key []byte, vs iter.Seq[[]byte], out mapreduce.ReduceContext) error {
				if last != nil && string(key) <= string(last) {
					violations.Add(1)
				}
				last = append(last[:0], key...)
				for range vs {
					values.Add(1)
				}
				return nil
			}
		}(),
	}
	old := debug.SetGCPercent(10)
	defer debug.SetGCPercent(old)
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sample)
	base := sample[0].Value.Uint64()
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > peak.Load() {
				peak.Store(v)
			}
		}
	}()
	res, err := mapreduce.Run(e.ctx, job, mapreduce.Config{Addr: e.Addr, LocalWorkers: 1, SortMemory: budget, TempDir: t.TempDir()})
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	c := res.Counters
	shuffled := c[mapreduce.CounterMapOutputBytes]
	if shuffled < 10*budget {
		t.Fatalf("shuffle of %d bytes is not 10× the budget %d", shuffled, budget)
	}
	if c[mapreduce.CounterSpilledRecords] == 0 || values.Load() != 400*200 || c[mapreduce.CounterReduceInput] != 400*200 || violations.Load() != 0 {
		t.Errorf("counters %v, %d values reduced (want %d), %d order violations", c, values.Load(), 400*200, violations.Load())
	}
	grew := int64(peak.Load()) - int64(base)
	t.Logf("shuffle %d MB, budget %d MB, peak heap growth %d MB (bound %d MB)", shuffled>>20, budget>>20, grew>>20, (budget+slack)>>20)
	if grew > budget+slack {
		t.Errorf("peak heap grew by %d bytes, over budget %d + %d", grew, budget, slack)
	}
}

// TestTotalOrder: with a total-order partitioner from sampled map keys,
// every reducer's keys are sorted and each partition's keys come before
// the next one's, so the concatenated output is globally sorted.
func TestTotalOrder(t *testing.T) {
	e, want := anchorsEnv(t)
	job, err := mapreduce.Build("test-wordcount", wordCountConf{Table: "web", Out: "-", Reducers: 4, FailMap: -1, SlowMap: -1, KillAt: -1}.bytes())
	if err != nil {
		t.Fatal(err)
	}
	cfg := mapreduce.Config{Addr: e.Addr, LocalWorkers: 3, TempDir: t.TempDir()}
	if err := mapreduce.TotalOrder(e.ctx, job, cfg, 50); err != nil {
		t.Fatal(err)
	}
	// The workers rebuild the job from its name and configuration, as
	// workers in other processes do: its Partition is unset, so the
	// bounds must come with the tasks.
	var mu sync.Mutex
	parts := map[int][]string{}
	cfg.Workers = nil
	for _, w := range mapreduce.NewLocalWorkers(3, mapreduce.LocalWorkerConfig{Dir: t.TempDir(), Resolve: func(s mapreduce.JobSpec) (*mapreduce.Job, error) {
		j, err := mapreduce.Build(s.Name, s.Conf)
		if err != nil {
			return nil, err
		}
		if j.Partition != nil {
			return nil, errors.New("rebuilt job has a partitioner")
		}
		reduce := j.Reduce
		j.Reduce = func(ctx context.Context, key []byte, vs iter.Seq[[]byte], out mapreduce.ReduceContext) error {
			mu.Lock()
			p := out.Task().Partition
			parts[p] = append(parts[p], string(key))
			mu.Unlock()
			return reduce(ctx, key, vs, out)
		}
		return j, nil
	}}) {
		cfg.Workers = append(cfg.Workers, w)
	}
	if _, err := mapreduce.Run(e.ctx, job, cfg); err != nil {
		t.Fatal(err)
	}
	var all []string
	used := 0
	for p := range 4 {
		if len(parts[p]) > 0 {
			used++
		}
		all = append(all, parts[p]...)
	}
	if !slices.IsSorted(all) || len(all) != len(want) {
		t.Errorf("partitions in order hold %d keys (want %d), sorted %v: %v", len(all), len(want), slices.IsSorted(all), parts)
	}
	if used < 3 {
		t.Errorf("only %d of 4 partitions got keys: the sampled bounds do not spread them", used)
	}
}

// TestFailedJobCommitsNoFiles: a map-only job writing files whose one map
// always fails leaves the output directory without any file (no part, no
// manifest, no temporary directory), although the other maps finished.
func TestFailedJobCommitsNoFiles(t *testing.T) {
	e, _ := anchorsEnv(t)
	dir := filepath.Join(t.TempDir(), "out")
	job := &mapreduce.Job{
		Input: &mapreduce.TableInput{Table: "web"},
		Map: func(_ context.Context, row cell.Row, out mapreduce.MapContext) error {
			if out.Task().Attempt.Task == 5 {
				return errors.New("deliberate")
			}
			return out.Write(row)
		},
		Output: &mapreduce.FileOutput{URL: dir, Format: "jsonl"},
	}
	_, err := mapreduce.Run(e.ctx, job, mapreduce.Config{Addr: e.Addr, LocalWorkers: 3, TempDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "map 5 failed 4 times") {
		t.Fatalf("err = %v", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range ents {
		t.Errorf("a failed job left %s in its output", en.Name())
	}
}

// metricValue returns the value of the counter name whose label values
// are labels, from reg.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var vals []string
			for _, l := range m.GetLabel() {
				vals = append(vals, l.GetValue())
			}
			if slices.Equal(vals, labels) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}

// TestDiscoveredWorker: the job's only worker is killed mid-job; a worker
// that appears afterwards (Config.Discover, as a remote pool reports a
// restarted worker) joins and finishes the job, with the right output.
func TestDiscoveredWorker(t *testing.T) {
	e, want := anchorsEnv(t)
	e.CreateTable(t, "counts", []string{"count"})
	workers := mapreduce.NewLocalWorkers(2, mapreduce.LocalWorkerConfig{Dir: t.TempDir()})
	var once sync.Once
	kill := func() { once.Do(workers[0].Kill) }
	killHook.Store(&kill)
	defer killHook.Store(nil)
	discover := func() []mapreduce.Worker {
		select {
		case <-workers[0].Lost():
			return []mapreduce.Worker{workers[1]}
		default:
			return nil
		}
	}
	res, err := runWordCount(t, e, wordCountConf{Table: "web", Out: "counts", Reducers: 2, FailMap: -1, SlowMap: -1, KillAt: 4},
		mapreduce.Config{Workers: []mapreduce.Worker{workers[0]}, Discover: discover})
	if err != nil {
		t.Fatal(err)
	}
	got := readCounts(t, e, "counts")
	for w, n := range want {
		if got[w] != n {
			t.Errorf("%s = %d, want %d", w, got[w], n)
		}
	}
	if res.Counters[mapreduce.CounterFailedAttempts] != 0 {
		t.Errorf("counters %v: the lost worker's attempts counted as failures", res.Counters)
	}
}

// TestRejoinedWorkerOfSameName: the job's only worker is lost mid-job and a
// new member of the same name appears (a remote pool's worker that was
// paused answers again): the coordinator gives up the old member's work
// and finishes the job on the new one, with the right output and no
// attempt counted failed.
func TestRejoinedWorkerOfSameName(t *testing.T) {
	e, want := anchorsEnv(t)
	e.CreateTable(t, "counts", []string{"count"})
	first := mapreduce.NewLocalWorker(mapreduce.LocalWorkerConfig{Name: "w", Dir: t.TempDir()})
	again := mapreduce.NewLocalWorker(mapreduce.LocalWorkerConfig{Name: "w", Dir: t.TempDir()})
	var once sync.Once
	kill := func() { once.Do(first.Kill) }
	killHook.Store(&kill)
	defer killHook.Store(nil)
	discover := func() []mapreduce.Worker {
		select {
		case <-first.Lost():
			return []mapreduce.Worker{again}
		default:
			return []mapreduce.Worker{first}
		}
	}
	res, err := runWordCount(t, e, wordCountConf{Table: "web", Out: "counts", Reducers: 2, FailMap: -1, SlowMap: -1, KillAt: 4},
		mapreduce.Config{Workers: []mapreduce.Worker{first}, Discover: discover})
	if err != nil {
		t.Fatal(err)
	}
	got := readCounts(t, e, "counts")
	for w, n := range want {
		if got[w] != n {
			t.Errorf("%s = %d, want %d", w, got[w], n)
		}
	}
	if res.Counters[mapreduce.CounterFailedAttempts] != 0 {
		t.Errorf("counters %v: the lost member's attempts counted as failures", res.Counters)
	}
}
