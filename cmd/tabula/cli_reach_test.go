package main

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// closedAddr returns an address on which nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// runTabulaWithin runs the verb as runTabula does, failing the test if it
// has not returned within limit (the verb is left running: it hangs).
func runTabulaWithin(t *testing.T, limit time.Duration, args ...string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, _, err := runTabula(t, args...)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		t.Fatalf("%s: still running after %s", strings.Join(args, " "), limit)
		return nil
	}
}

// TestStreamingVerbsUnreachable checks that the streaming verbs, which have
// no default deadline, fail with a clear error when no server listens
// instead of the official client retrying UNAVAILABLE forever.
func TestStreamingVerbsUnreachable(t *testing.T) {
	defer func(d time.Duration) { reachTimeout = d }(reachTimeout)
	reachTimeout = time.Second
	addr := closedAddr(t)
	for _, args := range [][]string{
		{"read", "users"},
		{"count", "users"},
		{"read", "users", "prefix=a", "count=3"},
	} {
		start := time.Now()
		err := runTabulaWithin(t, 20*time.Second, append(args, "--addr", addr)...)
		if err == nil {
			t.Fatalf("%s against %s: no error", args, addr)
		}
		for _, want := range []string{args[0] + ": UNAVAILABLE: no answer from " + addr, "is the server running?", "connection refused"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: err = %v, want it to contain %q", args, err, want)
			}
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("%s: failed after %s, want about the check's %s", args, took, reachTimeout)
		}
	}
}

// TestStreamingVerbsUsageFirst checks that the reachability check comes
// after the arguments': a mistake in them needs no server.
func TestStreamingVerbsUsageFirst(t *testing.T) {
	defer func(d time.Duration) { reachTimeout = d }(reachTimeout)
	reachTimeout = time.Minute // a check would outlast the test's limit
	addr := closedAddr(t)
	for _, args := range [][]string{
		{"read", "users", "prefx=a"},
		{"read", "users", "count=0"},
		{"count", "users", "bogus=1"},
	} {
		err := runTabulaWithin(t, 10*time.Second, append(args, "--addr", addr)...)
		var ue *usageError
		if !errors.As(err, &ue) {
			t.Errorf("%s: err = %v, want a usage error", args, err)
		}
	}
}

// slowServer is a Bigtable data service without PingAndWarm (UNIMPLEMENTED,
// as servers without it answer) whose ReadRows sends one row, pauses for
// pause, and sends another: a scan that outlasts the reachability check.
type slowServer struct {
	bigtablepb.UnimplementedBigtableServer
	pause time.Duration
}

func (s *slowServer) ReadRows(req *bigtablepb.ReadRowsRequest, stream bigtablepb.Bigtable_ReadRowsServer) error {
	for i, key := range []string{"a", "b"} {
		if i > 0 {
			time.Sleep(s.pause)
		}
		err := stream.Send(&bigtablepb.ReadRowsResponse{Chunks: []*bigtablepb.ReadRowsResponse_CellChunk{{
			RowKey:     []byte(key),
			FamilyName: wrapperspb.String("f"),
			Qualifier:  wrapperspb.Bytes([]byte("q")),
			Value:      []byte("v"),
			RowStatus:  &bigtablepb.ReadRowsResponse_CellChunk_CommitRow{CommitRow: true},
		}}})
		if err != nil {
			return err
		}
	}
	return nil
}

// TestStreamingVerbsNotCutOff checks that the reachability check bounds
// only itself: a scan that runs past it is not cut off, and a server that
// answers the check with an error (UNIMPLEMENTED) counts as reachable.
func TestStreamingVerbsNotCutOff(t *testing.T) {
	defer func(d time.Duration) { reachTimeout = d }(reachTimeout)
	reachTimeout = 300 * time.Millisecond
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	bigtablepb.RegisterBigtableServer(srv, &slowServer{pause: 4 * reachTimeout})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	addr := lis.Addr().String()

	out, _, err := runTabula(t, "count", "t", "--addr", addr)
	if err != nil || out != "2\n" {
		t.Errorf("count: %q, %v; want 2", out, err)
	}
	out, _, err = runTabula(t, "read", "t", "--addr", addr)
	if err != nil || !strings.Contains(out, "\na\n") || !strings.Contains(out, "\nb\n") {
		t.Errorf("read: %v, printed\n%s\nwant rows a and b", err, out)
	}
}

// TestStreamingVerbsUnderAuth checks that the reachability check does not
// stand in for the verb's own answer on a server with authentication on:
// without a token, or without a grant, read and count report the server's
// refusal at once; with a grant they read.
func TestStreamingVerbsUnderAuth(t *testing.T) {
	addr, tok := startAuthDev(t)
	as := func(who string, args ...string) []string { return append(args, "--token", tok[who]) }
	runCLISteps(t, addr, []cliStep{
		{args: as("root", "createtable", "users", "families=profile")},
		{args: as("root", "set", "users", "u1", "profile:name=Alice")},
		{args: as("root", "grant", "users", "user:alice", "read"), contain: []string{"user:alice"}},
		{args: []string{"read", "users"}, errWant: "UNAUTHENTICATED"},
		{args: []string{"count", "users"}, errWant: "UNAUTHENTICATED"},
		{args: as("bob", "read", "users"), errWant: "PERMISSION_DENIED"},
		{args: as("bob", "count", "users"), errWant: "PERMISSION_DENIED"},
		{args: as("alice", "read", "users"), contain: []string{"\nu1\n", "profile:name"}},
		{args: as("alice", "count", "users"), want: "1\n"},
	})
}
