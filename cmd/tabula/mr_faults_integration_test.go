//go:build integration

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tabuladb/tabula/mapreduce"
	"github.com/tabuladb/tabula/mapreduce/remote"
)

func TestMRClusterFaults(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := newTestCluster(t, clusterOptions{masters: 1, servers: 2})
	var workers []*roleProc
	for range 4 {
		workers = append(workers, c.startWorker("--slots", "2"))
	}
	c.waitAllServed(60*time.Second, 1)
	server := c.liveServers()[0].addr
	cl, admin := officialClients(t, ctx, server)
	want := mrLoadWordTable(t, ctx, admin, cl, "words", 900)
	_, ws := c.workerPool(ctx, 4)

	var backupAfter time.Duration // 0: the default
	run := func(t *testing.T, conf faultJobConf, ws []mapreduce.Worker, progress func(mapreduce.Status)) (*mapreduce.Result, error) {
		t.Helper()
		job, err := mapreduce.Build(testFaultJobName, conf.encode())
		if err != nil {
			t.Fatal(err)
		}
		return mapreduce.Run(ctx, job, mapreduce.Config{
			Addr: server, Workers: ws, Progress: progress, ProgressInterval: 100 * time.Millisecond, BackupAfter: backupAfter,
			Logger: slog.New(slog.NewTextHandler(mrTestLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
		})
	}
	base := faultJobConf{Table: mrFullName("words"), Reducers: 3, StuckMap: -1, FailMap: -1}

	// The reference: an undisturbed run, by the command a user runs, on
	// the workers registered in Consul.
	mrCreateOutputTable(t, ctx, admin, "ref")
	conf := base
	conf.Output = mrFullName("ref")
	cmd := exec.CommandContext(ctx, c.bin, "mr", "run", testFaultJobName, "--conf", string(conf.encode()), "--addr", server,
		"--workers-consul", c.consul, "--workers-cluster", c.name, "--min-workers", "4", "--progress", "none", "--format", "json")
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("tabula mr run --workers-consul: %v\n%s", err, stderr)
	}
	var printed struct {
		Counters map[string]int64 `json:"counters"`
	}
	if err := json.Unmarshal(out, &printed); err != nil || printed.Counters[mapreduce.CounterInputRows] != 900 {
		t.Fatalf("tabula mr run printed %s (%v), want counters with 900 input rows", out, err)
	}
	for _, w := range workers {
		if mrWorkerMetric(t, w, "tabula_mr_worker_attempts_total", `outcome="succeeded"`) < 1 {
			t.Fatalf("worker %s ran no attempt of the command's job", w.addr)
		}
	}
	ref := mrTableCells(t, ctx, cl, "ref")
	mrCheckCounts(t, ref, want)

	t.Run("KillWorkerMidJob", func(t *testing.T) {
		mrCreateOutputTable(t, ctx, admin, "killed")
		conf := base
		conf.Output = mrFullName("killed")
		conf.RowDelay = 20 * time.Millisecond // ≈ 2 s per map task
		// Kill -9 a worker once it holds a finished map output and runs
		// another attempt: both must be re-run elsewhere.
		var victim *roleProc
		var victimMaps float64 // map outputs of this job the victim held
		var once sync.Once
		before := map[*roleProc]float64{}
		for _, w := range workers {
			before[w] = mrWorkerMetric(t, w, "tabula_mr_worker_attempts_total", `kind="m"`, `outcome="succeeded"`)
		}
		stop := make(chan struct{})
		killed := make(chan struct{})
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				for _, w := range workers {
					done := mrWorkerMetric(t, w, "tabula_mr_worker_attempts_total", `kind="m"`, `outcome="succeeded"`) - before[w]
					if done >= 1 && mrWorkerMetric(t, w, "tabula_mr_worker_attempts_running", `kind="m"`) >= 1 {
						once.Do(func() {
							victim, victimMaps = w, done
							c.kill(w)
							close(killed)
						})
						return
					}
				}
			}
		}()
		res, err := run(t, conf, ws, nil)
		close(stop)
		if err != nil {
			t.Fatalf("run with a worker killed: %v", err)
		}
		select {
		case <-killed:
		default:
			t.Fatal("the job ended before any worker held a map output while running another attempt: nothing was killed")
		}
		var lost mapreduce.Worker
		for _, w := range ws {
			if strings.HasPrefix(w.Name(), victim.addr+"/") {
				lost = w
			}
		}
		if lost == nil {
			t.Fatalf("no pool worker for the victim at %s", victim.addr)
		}
		select {
		case <-lost.Lost():
			t.Logf("victim %s: %v", victim.addr, lost.(*remote.Client).LostErr())
		default:
			t.Fatalf("the pool did not declare the killed worker %s lost", lost.Name())
		}
		if res.Counters[mapreduce.CounterKilledAttempts] < 1 || res.Counters[mapreduce.CounterFailedAttempts] != 0 {
			t.Fatalf("counters %v: want the dead worker's attempts killed, none counted as failed", res.Counters)
		}
		// The map outputs the victim held, and what it ran, were re-run.
		if min := 9 + int64(victimMaps) + 1; res.Counters[mapreduce.CounterMapAttempts] < min {
			t.Fatalf("the victim held %v map outputs; %d map attempts ran, want at least %d", victimMaps, res.Counters[mapreduce.CounterMapAttempts], min)
		}
		got := mrTableCells(t, ctx, cl, "killed")
		if !mrCellsEqual(got, ref) {
			t.Fatalf("output after a kill -9 differs from the undisturbed run:\n got %v\nwant %v", got, ref)
		}
	})

	live := func() []mapreduce.Worker {
		var out []mapreduce.Worker
		for _, w := range ws {
			select {
			case <-w.Lost():
			default:
				out = append(out, w)
			}
		}
		return out
	}

	t.Run("BackupAttemptWins", func(t *testing.T) {
		mrCreateOutputTable(t, ctx, admin, "backup")
		conf := base
		conf.Output = mrFullName("backup")
		conf.StuckMap = 4 // its first attempt never ends by itself
		backupAfter = time.Second
		defer func() { backupAfter = 0 }()
		res, err := run(t, conf, live(), nil)
		if err != nil {
			t.Fatalf("run with a stuck map attempt: %v", err)
		}
		if res.Counters[mapreduce.CounterSpeculativeStarts] < 1 || res.Counters[mapreduce.CounterKilledAttempts] < 1 {
			t.Fatalf("counters %v: want a speculative start, and the stuck attempt killed", res.Counters)
		}
		got := mrTableCells(t, ctx, cl, "backup")
		if !mrCellsEqual(got, ref) {
			t.Fatalf("output with a backup attempt differs from the undisturbed run:\n got %v\nwant %v", got, ref)
		}
	})

	t.Run("AlwaysFailingTaskFailsJob", func(t *testing.T) {
		mrCreateOutputTable(t, ctx, admin, "failed")
		conf := base
		conf.Output = mrFullName("failed")
		conf.FailMap = 2
		before := 0.0
		for _, w := range c.workers {
			if w.alive() {
				before += mrWorkerMetric(t, w, "tabula_mr_worker_attempts_total", `kind="m"`, `outcome="failed"`)
			}
		}
		_, err := run(t, conf, live(), nil)
		if err == nil {
			t.Fatal("a job with a task that always fails succeeded")
		}
		if !strings.Contains(err.Error(), "-m-00002") || !strings.Contains(err.Error(), "deliberate failure of map 2") {
			t.Fatalf("job error %q does not name the task (…-m-00002) and its error", err)
		}
		after := 0.0
		for _, w := range c.workers {
			if w.alive() {
				after += mrWorkerMetric(t, w, "tabula_mr_worker_attempts_total", `kind="m"`, `outcome="failed"`)
			}
		}
		if after-before != 4 {
			t.Fatalf("the workers report %v failed map attempts, want 4 (MaxAttempts)", after-before)
		}
		t.Logf("job error: %v", err)
	})

	t.Run("KillWorkerDuringReduce", func(t *testing.T) {
		mrCreateOutputTable(t, ctx, admin, "killedreduce")
		conf := base
		conf.Output = mrFullName("killedreduce")
		conf.KeyDelay = 100 * time.Millisecond // ≈ 1.2 s per reduce task
		// Kill -9 a worker running a reduce attempt: that attempt is
		// re-run elsewhere, and the re-run cannot fetch the map outputs
		// the dead worker held, so those maps run again first.
		var victim *roleProc
		var once sync.Once
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				for _, w := range workers {
					if w.alive() && mrWorkerMetric(t, w, "tabula_mr_worker_attempts_running", `kind="r"`) >= 1 {
						once.Do(func() { victim = w; c.kill(w) })
						return
					}
				}
			}
		}()
		res, err := run(t, conf, live(), nil)
		close(stop)
		if err != nil {
			t.Fatalf("run with a worker killed during the reduce phase: %v", err)
		}
		if victim == nil {
			t.Fatal("no worker was running a reduce attempt: nothing was killed")
		}
		if res.Counters[mapreduce.CounterKilledAttempts] < 1 || res.Counters[mapreduce.CounterReduceAttempts] < 4 {
			t.Fatalf("counters %v: want the dead worker's reduce attempt killed and run again", res.Counters)
		}
		if got := mrTableCells(t, ctx, cl, "killedreduce"); !mrCellsEqual(got, ref) {
			t.Fatalf("output after a kill -9 in the reduce phase differs from the undisturbed run:\n got %v\nwant %v", got, ref)
		}
		t.Logf("victim %s; counters %v", victim.addr, res.Counters)
	})
}

// TestMRClusterWorkerScaling runs the same word count (with shuffle) on 1,
// 2 and 4 `tabula worker` processes of a local cluster, one slot each,
// checks every output, and prints input rows per second and the ratio to
// one worker. Every process shares this machine's cores (printed), which
// bound the scaling. The default input is small, to keep the suite fast;
// TABULA_LONG=1 uses 100000 rows of 40 words for figures worth recording:
//
//	TABULA_LONG=1 bash deploy/test.sh -run MRClusterWorkerScaling -v ./cmd/tabula/
func TestMRClusterWorkerScaling(t *testing.T) {
	rows, perRow, rounds := 3000, 3, 1
	if os.Getenv("TABULA_LONG") != "" {
		rows, perRow, rounds = 100000, 40, 3
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	c := newTestCluster(t, clusterOptions{masters: 1, servers: 2})
	for range 4 {
		c.startWorker("--slots", "1")
	}
	c.waitAllServed(60*time.Second, 1)
	server := c.liveServers()[0].addr
	cl, admin := officialClients(t, ctx, server)
	want := mrLoadWords(t, ctx, admin, cl, "words", rows, perRow)
	_, ws := c.workerPool(ctx, 4)

	// The worker counts take turns, round after round, so that the load
	// of the shared machine weighs on each alike; the median is reported.
	counts := []int{1, 2, 4}
	elapsed := map[int][]time.Duration{}
	for round := range rounds {
		for _, n := range counts {
			out := fmt.Sprintf("out%d", n)
			if round == 0 {
				mrCreateOutputTable(t, ctx, admin, out)
			}
			job, err := mapreduce.Build(testFaultJobName, faultJobConf{Table: mrFullName("words"), Output: mrFullName(out), Reducers: 4, StuckMap: -1, FailMap: -1}.encode())
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			res, err := mapreduce.Run(ctx, job, mapreduce.Config{Addr: server, Workers: ws[:n], NoSpeculation: true})
			if err != nil {
				t.Fatalf("%d workers: %v", n, err)
			}
			elapsed[n] = append(elapsed[n], time.Since(start))
			mrCheckCounts(t, mrTableCells(t, ctx, cl, out), want)
			if got := res.Counters[mapreduce.CounterInputRows]; got != int64(rows) {
				t.Fatalf("%d workers: %d input rows counted, want %d", n, got, rows)
			}
		}
	}
	median := func(ds []time.Duration) time.Duration {
		ds = slices.Clone(ds)
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	base := float64(rows) / median(elapsed[1]).Seconds()
	for _, n := range counts {
		m := median(elapsed[n])
		rate := float64(rows) / m.Seconds()
		t.Logf("MR word count, %d rows × %d words, 9 map tasks, 4 reducers, %d worker(s) × 1 slot, %d cores: median of %d %.2fs (%v), %.0f rows/s, %.2f× one worker",
			rows, perRow, n, runtime.NumCPU(), rounds, m.Seconds(), elapsed[n], rate, rate/base)
	}
}
