package remote

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/mapreduce"
	"github.com/tabuladb/tabula/mapreduce/remote/workerpb"
)

// flakyWorker serves a partition in chunks of 3 bytes and breaks the
// stream (UNAVAILABLE) after breakAfter chunks, breaks times.
type flakyWorker struct {
	workerpb.WorkerClient
	data       []byte
	breakAfter int
	breaks     int
	offsets    []int64 // the offset of every FetchPartition call
}

func (f *flakyWorker) FetchPartition(_ context.Context, req *workerpb.FetchPartitionRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[workerpb.Chunk], error) {
	f.offsets = append(f.offsets, req.Offset)
	if req.Attempt == "missing-m-00000-0" {
		return &flakyStream{err: status.Error(codes.NotFound, "no such output")}, nil
	}
	s := &flakyStream{data: f.data[req.Offset:], chunks: -1}
	if f.breaks > 0 {
		f.breaks--
		s.chunks = f.breakAfter
	}
	return s, nil
}

type flakyStream struct {
	grpc.ClientStream
	data   []byte
	chunks int // chunks left before the break; -1: none
	err    error
}

func (s *flakyStream) Recv() (*workerpb.Chunk, error) {
	if s.err != nil {
		return nil, s.err
	}
	if s.chunks == 0 {
		return nil, status.Error(codes.Unavailable, "connection reset")
	}
	if len(s.data) == 0 {
		return nil, io.EOF
	}
	n := min(3, len(s.data))
	c := &workerpb.Chunk{Data: s.data[:n]}
	s.data = s.data[n:]
	if s.chunks > 0 {
		s.chunks--
	}
	return c, nil
}

func TestFetchResumesAfterBreaks(t *testing.T) {
	data := []byte("abcdefghijklmnopqrstuvwxyz0123456789")
	a := mapreduce.AttemptID{Job: "j", Kind: mapreduce.MapTask}
	for _, tc := range []struct {
		name       string
		breaks     int
		wantErr    bool
		wantCalls  int
		breakAfter int
	}{
		{"no break", 0, false, 1, 2},
		{"two breaks", 2, false, 3, 2},
		{"too many breaks", fetchRetries + 1, true, fetchRetries + 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &flakyWorker{data: data, breakAfter: tc.breakAfter, breaks: tc.breaks}
			var counted int
			rc, err := openFetch(context.Background(), f, "w", a, 0, func(n int) { counted += n })
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			if tc.wantErr {
				if status.Code(err) != codes.Unavailable {
					t.Fatalf("read after %d breaks: %v, want the break's error", tc.breaks, err)
				}
			} else if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read %q, %v; want %q", got, err, data)
			}
			if len(f.offsets) != tc.wantCalls {
				t.Fatalf("%d calls (offsets %v), want %d", len(f.offsets), f.offsets, tc.wantCalls)
			}
			for i, off := range f.offsets {
				if want := int64(i * tc.breakAfter * 3); off != want {
					t.Fatalf("call %d at offset %d, want %d (resumed where the last stopped)", i, off, want)
				}
			}
			if counted != len(got) {
				t.Fatalf("counted %d bytes, read %d", counted, len(got))
			}
		})
	}
	f := &flakyWorker{data: data}
	if _, err := openFetch(context.Background(), f, "w", mapreduce.AttemptID{Job: "missing", Kind: mapreduce.MapTask}, 0, nil); !errors.Is(err, mapreduce.ErrNoMapOutput) {
		t.Fatalf("missing output: %v, want ErrNoMapOutput", err)
	}
}
