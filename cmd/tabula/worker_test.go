package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tabuladb/tabula/storage/cluster"
)

// startDevWithWorker starts tabula dev in process as the command does,
// with a worker of slots slots on its port (0: none).
func startDevWithWorker(t *testing.T, slots int) *cluster.Dev {
	t.Helper()
	cfg := cluster.DevConfig{Dir: t.TempDir(), Addr: "127.0.0.1:0", Logger: quietDevLogger()}
	wf := workerFlags{slots: slots, sortMemory: 8 << 20}
	stop, err := devWorker(&cfg, &wf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	d, err := cluster.StartDev(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
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
