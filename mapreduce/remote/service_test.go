package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/mapreduce"
	"github.com/tabuladb/tabula/mapreduce/remote/workerpb"
)

// The worker protocol, call by call: one map attempt run through a Client
// leaves its partitions on the worker, served whole, from an offset, and
// not at all for an attempt the worker never ran; bad requests are refused
// naming the field.
func TestServiceProtocol(t *testing.T) {
	e := startE2E(t)
	e.loadWords(t, "words", 300)
	w := startTestWorker(t, "127.0.0.1:0", nil, 2)
	pool, err := NewStaticPool([]string{w.Addr()}, PoolOptions{HeartbeatInterval: 50 * time.Millisecond, LostAfter: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ws, err := pool.WaitWorkers(e.ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	c := ws[0].(*Client)

	conf := must(json.Marshal(e2eConf{Table: "words", Out: "unused", Reducers: 3}))
	spec := mapreduce.JobSpec{ID: "proto-1", Name: "remote-e2e-wordcount", Conf: conf, Addr: e.addr, Reducers: 3, Project: "tabula", Instance: "dev"}
	a := mapreduce.AttemptID{Job: spec.ID, Kind: mapreduce.MapTask, Task: 0, Attempt: 0}
	res, err := c.RunTask(e.ctx, mapreduce.Task{Job: spec, Attempt: a, Split: &mapreduce.Split{Table: "words"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.PartitionBytes) != 3 || res.Counters[mapreduce.CounterInputRows] != 300 {
		t.Fatalf("map result %+v: want 3 partitions and 300 input rows", res)
	}

	for p, size := range res.PartitionBytes {
		rc, err := c.FetchPartition(e.ctx, a, p)
		if err != nil {
			t.Fatal(err)
		}
		whole, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(whole)) != size {
			t.Fatalf("partition %d: fetched %d bytes, the map reported %d", p, len(whole), size)
		}
		if size < 2 {
			continue
		}
		// A resumed fetch: the rest from an offset.
		off := size / 2
		stream, err := c.rpc.FetchPartition(e.ctx, &workerpb.FetchPartitionRequest{Attempt: a.String(), Partition: int32(p), Offset: off})
		if err != nil {
			t.Fatal(err)
		}
		var rest []byte
		for {
			chunk, err := stream.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			rest = append(rest, chunk.Data...)
		}
		if !bytes.Equal(rest, whole[off:]) {
			t.Fatalf("partition %d from offset %d: %d bytes, not the whole's suffix", p, off, len(rest))
		}
	}

	// An attempt the worker never ran: ErrNoMapOutput.
	other := a
	other.Attempt = 7
	if _, err := c.FetchPartition(e.ctx, other, 0); !errors.Is(err, mapreduce.ErrNoMapOutput) {
		t.Fatalf("fetch of an attempt never run: %v, want ErrNoMapOutput", err)
	}

	// A reduce that fetches map 0's output (held here) and map 1's (never
	// run) fails with a FetchError naming map 1: the coordinator's cue to
	// re-run that map rather than blame the reduce.
	red := mapreduce.Task{Job: spec, Attempt: mapreduce.AttemptID{Job: spec.ID, Kind: mapreduce.ReduceTask, Task: 0}, Partition: 0,
		MapOutputs: []mapreduce.MapOutputLocation{{Map: 0, Attempt: a, Worker: c.Name()}, {Map: 1, Attempt: other, Worker: c.Name()}}}
	_, err = c.RunTask(e.ctx, red, nil)
	var fe *mapreduce.FetchError
	if !errors.As(err, &fe) || fe.Map != 1 || fe.Worker != c.Name() {
		t.Fatalf("reduce with a missing map output: %v, want a FetchError for map 1 on %s", err, c.Name())
	}
	// A map output held by a worker the pool does not know cannot be
	// fetched either.
	red.MapOutputs = []mapreduce.MapOutputLocation{{Map: 0, Attempt: a, Worker: "gone:1/000000"}}
	if _, err := c.RunTask(e.ctx, red, nil); !errors.As(err, &fe) || fe.Map != 0 || !errors.Is(err, mapreduce.ErrNoMapOutput) {
		t.Fatalf("reduce fetching from an unknown worker: %v, want a FetchError for map 0", err)
	}

	conn, err := grpc.NewClient(w.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rpc := workerpb.NewWorkerClient(conn)
	for _, tc := range []struct {
		req   *workerpb.FetchPartitionRequest
		field string
	}{
		{&workerpb.FetchPartitionRequest{Attempt: "nonsense", Partition: 0}, "attempt"},
		{&workerpb.FetchPartitionRequest{Attempt: strings.Replace(a.String(), "-m-", "-r-", 1), Partition: 0}, "attempt"},
		{&workerpb.FetchPartitionRequest{Attempt: a.String(), Partition: -1}, "partition"},
		{&workerpb.FetchPartitionRequest{Attempt: a.String(), Partition: 0, Offset: -5}, "offset"},
		{&workerpb.FetchPartitionRequest{Attempt: a.String(), Partition: 0, Offset: 1 << 40}, "offset"},
	} {
		stream, err := rpc.FetchPartition(e.ctx, tc.req)
		if err == nil {
			_, err = stream.Recv()
		}
		if c := status.Code(err); (c != codes.InvalidArgument && c != codes.OutOfRange) || !strings.HasPrefix(status.Convert(err).Message(), tc.field) {
			t.Errorf("FetchPartition(%v): %v, want INVALID_ARGUMENT or OUT_OF_RANGE naming %s", tc.req, err, tc.field)
		}
	}
	for _, tc := range []struct {
		req   *workerpb.RunTaskRequest
		field string
	}{
		{&workerpb.RunTaskRequest{Task: []byte("{not json"), Attempt: "x"}, "task"},
		{&workerpb.RunTaskRequest{Task: must(json.Marshal(mapreduce.Task{Job: spec, Attempt: a})), Attempt: "other-m-00000-0"}, "attempt"},
	} {
		stream, err := rpc.RunTask(e.ctx, tc.req)
		if err == nil {
			_, err = stream.Recv()
		}
		if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), tc.field) {
			t.Errorf("RunTask(%s): %v, want INVALID_ARGUMENT naming %s", tc.req.Attempt, err, tc.field)
		}
	}
	if _, err := rpc.ForgetJob(e.ctx, &workerpb.ForgetJobRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("ForgetJob of no job: %v, want INVALID_ARGUMENT", err)
	}

	// Cleanup drops the job's outputs.
	if err := c.Cleanup(e.ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.FetchPartition(e.ctx, a, 0); !errors.Is(err, mapreduce.ErrNoMapOutput) {
		t.Fatalf("fetch after Cleanup: %v, want ErrNoMapOutput", err)
	}
}

// A stuck attempt is killed by cancelling its call, and through
// KillAttempt; a second attempt with the same id is refused while the
// first runs.
func TestServiceKillsAttempts(t *testing.T) {
	e := startE2E(t)
	e.loadWords(t, "words", 50)
	w := startTestWorker(t, "127.0.0.1:0", nil, 2)
	pool, err := NewStaticPool([]string{w.Addr()}, PoolOptions{HeartbeatInterval: 50 * time.Millisecond, LostAfter: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ws, err := pool.WaitWorkers(e.ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	c := ws[0].(*Client)
	block := func(string) bool { return true } // every first attempt waits until killed
	e2eKill.Store(&block)
	defer e2eKill.Store(nil)
	conf := must(json.Marshal(e2eConf{Table: "words", Out: "unused", Reducers: 1, Kill: true}))
	spec := mapreduce.JobSpec{ID: "kill-1", Name: "remote-e2e-wordcount", Conf: conf, Addr: e.addr, Reducers: 1, Project: "tabula", Instance: "dev"}
	task := mapreduce.Task{Job: spec, Attempt: mapreduce.AttemptID{Job: spec.ID, Kind: mapreduce.MapTask}, Split: &mapreduce.Split{Table: "words"}}

	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() {
		_, err := c.RunTask(ctx, task, nil)
		done <- err
	}()
	waitUntil(t, "attempt running", func() bool { return w.svc.Running() == 1 })
	// The same attempt again is refused while it runs.
	if _, err := c.RunTask(e.ctx, task, nil); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("a second run of a running attempt: %v, want ALREADY_EXISTS", err)
	}
	// The attempt outlives several heartbeat intervals without the
	// client giving up on it.
	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("stuck attempt ended by itself: %v", err)
	default:
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled attempt: %v, want context.Canceled", err)
	}
	waitUntil(t, "cancelled attempt gone from the worker", func() bool { return w.svc.Running() == 0 })

	// KillAttempt, for an attempt whose call is elsewhere.
	task.Attempt.Task = 1
	go func() {
		_, err := c.RunTask(e.ctx, task, nil)
		done <- err
	}()
	waitUntil(t, "second attempt running", func() bool { return w.svc.Running() == 1 })
	if err := c.Kill(e.ctx, task.Attempt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "context canceled") {
			t.Fatalf("killed attempt: %v, want its cancellation", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("KillAttempt did not end the attempt")
	}
}
