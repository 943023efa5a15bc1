package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tabuladb/tabula/storage/cluster"
)

// startDevWithWorker starts tabula dev in process as the command does,
// with a worker of slots slots on its port (0: none).
func startDevWithWorker(t *testing.T, slots int) *cluster.Dev {
	d, _ := startDevWithWorkerMetrics(t, slots)
	return d
}

// startDevWithWorkerMetrics is startDevWithWorker, with the registry of
// the worker's metrics.
func startDevWithWorkerMetrics(t *testing.T, slots int) (*cluster.Dev, *prometheus.Registry) {
	t.Helper()
	cfg := cluster.DevConfig{Dir: t.TempDir(), Addr: "127.0.0.1:0", Logger: quietDevLogger()}
	wf := workerFlags{slots: slots, sortMemory: 8 << 20}
	reg := prometheus.NewRegistry()
	stop, err := devWorkerWithMetrics(&cfg, &wf, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	d, err := cluster.StartDev(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, reg
}

// attemptsOn sums the worker's finished attempts of outcome.
func attemptsOn(t *testing.T, reg *prometheus.Registry, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "tabula_mr_worker_attempts_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// tabula mr run against tabula dev runs its tasks on the dev server's
// worker, with the results of a run in the command's own process.
func TestMRRunOnDevWorker(t *testing.T) {
	d, reg := startDevWithWorkerMetrics(t, 2)
	addr := d.Addr()
	if _, _, err := runTabula(t, "load", "webtable", "--rows", "2000", "--addr", addr); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		out, _, err := runTabula(t, append(args, "--addr", addr, "--progress", "none")...)
		if err != nil {
			t.Fatalf("%s: %v", strings.Join(args, " "), err)
		}
		return out
	}
	if got := mrCounter(t, run("mr", "run", "rowcounter", "webtable"), "ROWS"); got != "2000" {
		t.Fatalf("rowcounter on the dev worker: ROWS %s, want 2000", got)
	}
	onWorker := attemptsOn(t, reg, "succeeded")
	if onWorker < 1 {
		t.Fatal("rowcounter ran no attempt on the dev server's worker")
	}
	for _, tbl := range []string{"wc_remote", "wc_local"} {
		if _, _, err := runTabula(t, "createtable", tbl, "families=count", "--addr", addr); err != nil {
			t.Fatal(err)
		}
	}
	run("mr", "run", "wordcount", "webtable", "--output", "table:wc_remote")
	if attemptsOn(t, reg, "succeeded") <= onWorker {
		t.Fatal("wordcount ran no attempt on the dev server's worker")
	}
	onWorker = attemptsOn(t, reg, "succeeded")
	run("mr", "run", "wordcount", "webtable", "--output", "table:wc_local", "--in-process")
	if attemptsOn(t, reg, "succeeded") != onWorker {
		t.Fatal("--in-process ran attempts on the dev server's worker")
	}
	remote, _, err := runTabula(t, "read", "wc_remote", "--addr", addr)
	if err != nil {
		t.Fatal(err)
	}
	local, _, err := runTabula(t, "read", "wc_local", "--addr", addr)
	if err != nil {
		t.Fatal(err)
	}
	if remote != local || len(local) < 100 {
		t.Fatalf("word counts differ between the dev worker and in-process:\n%.500s\n---\n%.500s", remote, local)
	}
}

// `tabula mr run --addr DEV` runs its tasks on the dev server's worker;
// against a server without one, and with --in-process, in its own process.
func TestMRWorkersFollowTheServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	flags := mrWorkerFlags{minWorkers: 1, wait: 10 * time.Second, heartbeat: 50 * time.Millisecond, lostAfter: time.Second}

	withWorker := startDevWithWorker(t, 3)
	ws, release, err := flags.workers(ctx, withWorker.Addr(), quietDevLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if len(ws) != 1 || !strings.HasPrefix(ws[0].Name(), "dev/") || ws[0].Slots() != 3 {
		t.Fatalf("workers of a dev server with a worker: %v, want one dev/… worker with 3 slots", ws)
	}

	inProcess := flags
	inProcess.inProcess = true
	if ws, _, err := inProcess.workers(ctx, withWorker.Addr(), quietDevLogger()); err != nil || ws != nil {
		t.Fatalf("--in-process: %v, %v; want no remote workers", ws, err)
	}

	without := startDevWithWorker(t, 0)
	if ws, _, err := flags.workers(ctx, without.Addr(), quietDevLogger()); err != nil || ws != nil {
		t.Fatalf("server without a worker: %v, %v; want no remote workers", ws, err)
	}

	both := flags
	both.addrs, both.inProcess = []string{withWorker.Addr()}, true
	if _, _, err := both.workers(ctx, withWorker.Addr(), quietDevLogger()); err == nil || !strings.Contains(err.Error(), "exclude each other") {
		t.Fatalf("--worker-addrs with --in-process: %v, want a refusal", err)
	}
}

func TestWorkerFlagsRefuseBadValues(t *testing.T) {
	for _, tc := range []struct {
		flags workerFlags
		want  string
	}{
		{workerFlags{slots: 0, sortMemory: 64 << 20}, "--slots"},
		{workerFlags{slots: 1, sortMemory: 1000}, "--sort-memory"},
		{workerFlags{slots: 1, sortMemory: 64 << 20, dir: "/proc/no-such-dir"}, "--dir"},
	} {
		if _, err := tc.flags.config(""); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", tc.flags, err, tc.want)
		}
	}
}
