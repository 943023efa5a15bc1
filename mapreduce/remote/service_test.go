package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/mapreduce"
	"github.com/tabuladb/tabula/mapreduce/remote/workerpb"
	"github.com/tabuladb/tabula/security/auth"
	"github.com/tabuladb/tabula/storage/cluster"
)

// The worker protocol, call by call: one map attempt run through a Client
// leaves its partitions on the worker, served whole, from an offset, and
// not at all for an attempt the worker never ran; bad requests are refused
// naming the field.
func TestServiceProtocol(t *testing.T) {
	e := startE2E(t)
	e.loadWords(t, "words", 300)
	w := startTestWorker(t, "127.0.0.1:0", nil, 2)
	c := e.workerClient(t, w.Addr())

	conf := must(json.Marshal(e2eConf{Table: "words", Out: "unused", Reducers: 3}))
	spec := mapreduce.JobSpec{ID: "proto-1", Token: "proto-1-token", Name: "remote-e2e-wordcount", Conf: conf, Addr: e.addr, Reducers: 3, Project: "tabula", Instance: "dev"}
	a := mapreduce.AttemptID{Job: spec.ID, Kind: mapreduce.MapTask, Task: 0, Attempt: 0}
	// The coordinator's calls carry the job's token.
	jctx := mapreduce.ContextWithJobToken(e.ctx, spec.Token)
	res, err := c.RunTask(jctx, mapreduce.Task{Job: spec, Attempt: a, Split: &mapreduce.Split{Table: "words"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.PartitionBytes) != 3 || res.Counters[mapreduce.CounterInputRows] != 300 {
		t.Fatalf("map result %+v: want 3 partitions and 300 input rows", res)
	}

	for p, size := range res.PartitionBytes {
		rc, err := c.FetchPartition(jctx, a, p)
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
		stream, err := c.rpc.FetchPartition(withJobToken(jctx), &workerpb.FetchPartitionRequest{Attempt: a.String(), Partition: int32(p), Offset: off})
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
	if _, err := c.FetchPartition(jctx, other, 0); !errors.Is(err, mapreduce.ErrNoMapOutput) {
		t.Fatalf("fetch of an attempt never run: %v, want ErrNoMapOutput", err)
	}

	// A reduce that fetches map 0's output (held here) and map 1's (never
	// run) fails with a FetchError naming map 1: the coordinator's cue to
	// re-run that map rather than blame the reduce.
	red := mapreduce.Task{Job: spec, Attempt: mapreduce.AttemptID{Job: spec.ID, Kind: mapreduce.ReduceTask, Task: 0}, Partition: 0,
		MapOutputs: []mapreduce.MapOutputLocation{{Map: 0, Attempt: a, Worker: c.Name()}, {Map: 1, Attempt: other, Worker: c.Name()}}}
	_, err = c.RunTask(jctx, red, nil)
	var fe *mapreduce.FetchError
	if !errors.As(err, &fe) || fe.Map != 1 || fe.Worker != c.Name() {
		t.Fatalf("reduce with a missing map output: %v, want a FetchError for map 1 on %s", err, c.Name())
	}
	// A map output held by a worker the pool does not know cannot be
	// fetched either.
	red.MapOutputs = []mapreduce.MapOutputLocation{{Map: 0, Attempt: a, Worker: "gone:1/000000"}}
	if _, err := c.RunTask(jctx, red, nil); !errors.As(err, &fe) || fe.Map != 0 || !errors.Is(err, mapreduce.ErrNoMapOutput) {
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
		stream, err := rpc.FetchPartition(withJobToken(jctx), tc.req)
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
		{&workerpb.RunTaskRequest{Task: must(json.Marshal(mapreduce.Task{Job: mapreduce.JobSpec{ID: "tokenless"}, Attempt: mapreduce.AttemptID{Job: "tokenless"}})), Attempt: "tokenless-m-00000-0"}, "task"},
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
	if err := c.Cleanup(jctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.FetchPartition(jctx, a, 0); !errors.Is(err, mapreduce.ErrNoMapOutput) {
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
	c := e.workerClient(t, w.Addr())
	block := func(string) bool { return true } // every first attempt waits until killed
	e2eKill.Store(&block)
	defer e2eKill.Store(nil)
	conf := must(json.Marshal(e2eConf{Table: "words", Out: "unused", Reducers: 1, Kill: true}))
	spec := mapreduce.JobSpec{ID: "kill-1", Token: "kill-1-token", Name: "remote-e2e-wordcount", Conf: conf, Addr: e.addr, Reducers: 1, Project: "tabula", Instance: "dev"}
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
	// Without the job's token the kill is refused and the attempt runs on.
	if err := c.Kill(e.ctx, task.Attempt); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("KillAttempt without the job token: %v, want PERMISSION_DENIED", err)
	}
	if w.svc.Running() != 1 {
		t.Fatal("a refused KillAttempt ended the attempt")
	}
	if err := c.Kill(mapreduce.ContextWithJobToken(e.ctx, spec.Token), task.Attempt); err != nil {
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

// workerClient returns the Client of the worker at addr, from a static
// pool dialing it with opts.
func (e *e2eEnv) workerClient(t *testing.T, addr string, opts ...grpc.DialOption) *Client {
	t.Helper()
	pool, err := NewStaticPool([]string{addr}, PoolOptions{HeartbeatInterval: 50 * time.Millisecond, LostAfter: time.Second, DialOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	ws, err := pool.WaitWorkers(e.ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	return ws[0].(*Client)
}

// Job tokens: a worker serves a job's map output, and forgets the job,
// only for callers presenting the job's token (the coordinator and the
// job's reducers), whoever they authenticate as; an attempt bringing
// another token for a job the worker knows is refused. With
// authentication on, a call without credentials is refused before
// (UNAUTHENTICATED).
func TestServiceJobTokens(t *testing.T) {
	e := startE2E(t)
	e.loadWords(t, "words", 100)
	tokenFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokenFile, []byte("alice-token-0123456789abcdef alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	guard := must((&cluster.AuthConfig{Authenticator: must(auth.New(auth.Config{TokenFile: tokenFile}))}).WorkerServerOptions(nil, nil))
	w := startTestWorker(t, "127.0.0.1:0", nil, 2, guard...)
	alice := grpc.WithPerRPCCredentials(auth.BearerToken("alice-token-0123456789abcdef"))
	c := e.workerClient(t, w.Addr(), alice)
	spec := mapreduce.JobSpec{ID: "tok-1", Token: "tok-1-secret", Name: "remote-e2e-wordcount", Addr: e.addr, Reducers: 2, Project: "tabula", Instance: "dev",
		Conf: must(json.Marshal(e2eConf{Table: "words", Out: "unused", Reducers: 2}))}
	a := mapreduce.AttemptID{Job: spec.ID, Kind: mapreduce.MapTask}
	jctx := mapreduce.ContextWithJobToken(e.ctx, spec.Token)
	if _, err := c.RunTask(jctx, mapreduce.Task{Job: spec, Attempt: a, Split: &mapreduce.Split{Table: "words"}}, nil); err != nil {
		t.Fatal(err)
	}
	fetch := func(ctx context.Context, creds ...grpc.DialOption) ([]byte, error) {
		conn, err := grpc.NewClient(w.Addr(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, creds...)...)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		rc, err := openFetch(ctx, workerpb.NewWorkerClient(conn), c.Name(), a, 0, nil)
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		return io.ReadAll(rc)
	}
	whole, err := fetch(withJobToken(jctx), alice)
	if err != nil || len(whole) == 0 {
		t.Fatalf("fetch with the job's token: %d bytes, %v", len(whole), err)
	}
	for name, ctx := range map[string]context.Context{
		"without the job's token":  e.ctx,
		"with another job's token": mapreduce.ContextWithJobToken(e.ctx, "tok-2-secret"),
	} {
		if _, err := fetch(withJobToken(ctx), alice); status.Code(errors.Unwrap(err)) != codes.PermissionDenied {
			t.Errorf("fetch %s: %v, want PERMISSION_DENIED", name, err)
		}
	}
	if _, err := fetch(withJobToken(jctx)); status.Code(errors.Unwrap(err)) != codes.Unauthenticated {
		t.Errorf("fetch without credentials: %v, want UNAUTHENTICATED", err)
	}
	// Another token for the same job is not admitted.
	forged := spec
	forged.Token = "forged"
	if _, err := c.RunTask(mapreduce.ContextWithJobToken(e.ctx, forged.Token), mapreduce.Task{Job: forged, Attempt: mapreduce.AttemptID{Job: spec.ID, Kind: mapreduce.MapTask, Attempt: 1}, Split: &mapreduce.Split{Table: "words"}}, nil); status.Code(errors.Unwrap(err)) != codes.PermissionDenied {
		t.Errorf("an attempt with another token for the job: %v, want PERMISSION_DENIED", err)
	}
	// ForgetJob without the token forgets nothing.
	if err := c.Cleanup(e.ctx, spec.ID); status.Code(errors.Unwrap(err)) != codes.PermissionDenied {
		t.Errorf("ForgetJob without the job's token: %v, want PERMISSION_DENIED", err)
	}
	if again, err := fetch(withJobToken(jctx), alice); err != nil || !bytes.Equal(again, whole) {
		t.Fatalf("after a refused ForgetJob: %d bytes (want %d), %v", len(again), len(whole), err)
	}
	if err := c.Cleanup(jctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := fetch(withJobToken(jctx), alice); !errors.Is(err, mapreduce.ErrNoMapOutput) {
		t.Errorf("fetch after ForgetJob: %v, want ErrNoMapOutput", err)
	}
}
