package remote

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	dto "github.com/prometheus/client_model/go"

	"github.com/tabuladb/tabula/mapreduce"
	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/cluster"
	"github.com/tabuladb/tabula/storage/coord"
)

// End-to-end: jobs run by a coordinator in this process on remote workers
// (real gRPC, each with its own directory, registered in an in-process
// lock service) against an in-process tabula dev, checked through the
// official Cloud Bigtable client.

type e2eConf struct {
	Table, Out string
	Reducers   int
	// Kill: the first attempt of every map asks e2eKill, before it reads
	// its split, whether its worker is to crash now.
	Kill bool
}

// e2eKill is asked by map attempts of a Kill job whether it crashed their
// worker; set by the test.
var e2eKill atomic.Pointer[func(attempt string) bool]

func init() {
	mapreduce.Register("remote-e2e-wordcount", "TABLE word count (remote tests)", func(conf []byte) (*mapreduce.Job, error) {
		var c e2eConf
		if err := json.Unmarshal(conf, &c); err != nil {
			return nil, err
		}
		sum := func(vs iter.Seq[int64]) int64 {
			var n int64
			for v := range vs {
				n += v
			}
			return n
		}
		return &mapreduce.Job{
			Input: &mapreduce.TableInput{Table: c.Table},
			Map: mapreduce.TypedMap(mapreduce.String, mapreduce.Int64, func(ctx context.Context, row cell.Row, emit func(string, int64) error, out mapreduce.MapContext) error {
				if a := out.Task().Attempt; c.Kill && a.Attempt == 0 {
					if f := e2eKill.Load(); f != nil && (*f)(a.String()) {
						<-ctx.Done() // this attempt's worker is gone
						return ctx.Err()
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
			Combine: mapreduce.TypedCombine(mapreduce.String, mapreduce.Int64, func(_ string, vs iter.Seq[int64], emit func(int64) error) error {
				return emit(sum(vs))
			}),
			// Untyped, writing the key it is given: the output must not
			// depend on the merge's reuse of the key's bytes.
			Reduce: func(_ context.Context, key []byte, vs iter.Seq[[]byte], out mapreduce.ReduceContext) error {
				var n int64
				for v := range vs {
					x, err := mapreduce.Int64.Decode(v)
					if err != nil {
						return err
					}
					n += x
				}
				return out.Write(cell.Row{Key: key, Cells: []cell.Cell{{Family: "f", Qualifier: []byte("n"), Timestamp: mapreduce.JobTimestamp, Value: []byte(strconv.FormatInt(n, 10))}}})
			},
			Reducers: c.Reducers,
			Output:   &mapreduce.TableOutput{Table: c.Out},
		}, nil
	})
}

type e2eEnv struct {
	ctx   context.Context
	addr  string
	admin *bigtable.AdminClient
	data  *bigtable.Client
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func startE2E(t *testing.T) *e2eEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	d, err := cluster.StartDev(ctx, cluster.DevConfig{Dir: t.TempDir(), Addr: "127.0.0.1:0", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	opts := []option.ClientOption{option.WithEndpoint(d.Addr()), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials()))}
	admin, err := bigtable.NewAdminClient(ctx, "tabula", "dev", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	data, err := bigtable.NewClientWithConfig(ctx, "tabula", "dev", bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { data.Close() })
	return &e2eEnv{ctx: ctx, addr: d.Addr(), admin: admin, data: data}
}

func (e *e2eEnv) createTable(t *testing.T, name string, splits ...string) {
	t.Helper()
	if err := e.admin.CreateTableFromConf(e.ctx, &bigtable.TableConf{TableID: name, Families: map[string]bigtable.GCPolicy{"f": bigtable.NoGcPolicy()}, SplitKeys: splits}); err != nil {
		t.Fatal(err)
	}
}

// loadWords writes rows rows of three words each over 9 tablets and
// returns the word counts.
func (e *e2eEnv) loadWords(t *testing.T, table string, rows int) map[string]int64 {
	t.Helper()
	e.createTable(t, table, "c", "f", "i", "l", "o", "r", "u", "x")
	want := map[string]int64{}
	var keys []string
	var muts []*bigtable.Mutation
	for j := range rows {
		words := []string{fmt.Sprint("w", j%37), fmt.Sprint("w", (j*7)%37), fmt.Sprint("w", (j*13+5)%37)}
		for _, w := range words {
			want[w]++
		}
		m := bigtable.NewMutation()
		m.Set("f", "text", bigtable.Timestamp(1000+int64(j)), []byte(strings.Join(words, " ")))
		keys = append(keys, fmt.Sprintf("%c%06d", 'a'+j%26, j))
		muts = append(muts, m)
	}
	errs, err := e.data.Open(table).ApplyBulk(e.ctx, keys, muts)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return want
}

// dump is every cell of a table, "row|column|timestamp|value", in order.
func (e *e2eEnv) dump(t *testing.T, table string) []string {
	t.Helper()
	var out []string
	err := e.data.Open(table).ReadRows(e.ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
		for _, items := range r {
			for _, it := range items {
				out = append(out, fmt.Sprintf("%s|%s|%d|%s", it.Row, it.Column, it.Timestamp, it.Value))
			}
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func checkWordCounts(t *testing.T, dump []string, want map[string]int64) {
	t.Helper()
	got := map[string]int64{}
	for _, line := range dump {
		f := strings.Split(line, "|")
		n, _ := strconv.ParseInt(f[3], 10, 64)
		got[f[0]] += n
	}
	if len(got) != len(want) || len(dump) != len(want) {
		t.Fatalf("output: %d cells, %d words; want %d words", len(dump), len(got), len(want))
	}
	for w, n := range want {
		if got[w] != n {
			t.Fatalf("word %s: %d, want %d", w, got[w], n)
		}
	}
}

// crash stops the worker as a kill -9 would: no unregistering, its
// attempts and its served outputs gone at once.
func (w *Worker) crash() {
	w.grpc.Stop()
	w.svc.KillAll()
}

func TestRemoteWorkersRunJobs(t *testing.T) {
	e := startE2E(t)
	want := e.loadWords(t, "words", 900)
	lock := coord.NewLocal(coord.LocalConfig{LockDelay: -1})
	defer lock.Close()
	var workers []*Worker
	for range 3 {
		workers = append(workers, startTestWorker(t, "127.0.0.1:0", lock, 2))
	}
	pool, err := NewConsulPool(lock, PoolOptions{HeartbeatInterval: 50 * time.Millisecond, LostAfter: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ws, err := pool.WaitWorkers(e.ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, c e2eConf, ws []mapreduce.Worker) (*mapreduce.Result, error) {
		t.Helper()
		job, err := mapreduce.Build("remote-e2e-wordcount", must(json.Marshal(c)))
		if err != nil {
			t.Fatal(err)
		}
		return mapreduce.Run(e.ctx, job, mapreduce.Config{Addr: e.addr, Workers: ws, Logger: quiet()})
	}

	e.createTable(t, "ref")
	res, err := run(t, e2eConf{Table: "words", Out: "ref", Reducers: 3}, ws)
	if err != nil {
		t.Fatal(err)
	}
	ref := e.dump(t, "ref")
	checkWordCounts(t, ref, want)
	if got := res.Counters[mapreduce.CounterInputRows]; got != 900 {
		t.Fatalf("input rows %d, want 900", got)
	}
	// The reducers fetched from other workers over the protocol.
	var served float64
	for _, w := range workers {
		var m dto.Metric
		if err := w.svc.metrics.served.Write(&m); err != nil {
			t.Fatal(err)
		}
		served += m.GetCounter().GetValue()
	}
	if served == 0 || int64(served) > res.Counters[mapreduce.CounterShuffleBytes] {
		t.Fatalf("workers served %v bytes of map output; shuffle was %d bytes", served, res.Counters[mapreduce.CounterShuffleBytes])
	}

	t.Run("CrashedWorker", func(t *testing.T) {
		var victim *Worker
		var victimMaps int64 // map outputs the victim held when it died
		before := map[*Worker]int64{}
		for _, w := range workers {
			before[w] = succeededMaps(w)
		}
		// The first map attempt to start on a worker that already holds a
		// map output of this job crashes that worker: 9 maps on 6 slots
		// make sure one does.
		var mu sync.Mutex
		kill := func(attempt string) bool {
			mu.Lock()
			defer mu.Unlock()
			if victim != nil {
				return false
			}
			for _, w := range workers {
				w.svc.mu.Lock()
				_, here := w.svc.running[attempt]
				w.svc.mu.Unlock()
				if here && succeededMaps(w) > before[w] {
					victim, victimMaps = w, succeededMaps(w)-before[w]
					w.crash()
					return true
				}
			}
			return false
		}
		e2eKill.Store(&kill)
		defer e2eKill.Store(nil)
		e.createTable(t, "crashed")
		res, err := run(t, e2eConf{Table: "words", Out: "crashed", Reducers: 3, Kill: true}, ws)
		if err != nil {
			t.Fatal(err)
		}
		if victim == nil {
			t.Fatal("no worker crashed")
		}
		if got := e.dump(t, "crashed"); !slices.Equal(got, ref) {
			t.Fatalf("output after a worker crashed differs from the undisturbed run:\n got %v\nwant %v", got, ref)
		}
		if res.Counters[mapreduce.CounterKilledAttempts] < 1 || res.Counters[mapreduce.CounterFailedAttempts] != 0 {
			t.Fatalf("counters %v: want the crashed worker's attempts killed, none failed", res.Counters)
		}
		// Every map output the victim held was re-run, and the attempt it
		// was running.
		if victimMaps < 1 || res.Counters[mapreduce.CounterMapAttempts] < 9+victimMaps+1 {
			t.Fatalf("victim held %d map outputs; %d map attempts ran, want at least %d", victimMaps, res.Counters[mapreduce.CounterMapAttempts], 9+victimMaps+1)
		}
	})
}

// succeededMaps is how many map attempts succeeded on w.
func succeededMaps(w *Worker) int64 {
	var m dto.Metric
	_ = w.svc.metrics.attempts.WithLabelValues("m", "succeeded").Write(&m)
	return int64(m.GetCounter().GetValue())
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
