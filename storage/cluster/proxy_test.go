package cluster

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
)

// notProto is bytes no protobuf decoder accepts (a truncated varint field),
// so a proxy that decoded them would fail.
var notProto = []byte{0x08, 0xff, 0xff, 0xff}

func TestProxyCodec(t *testing.T) {
	c := proxyCodec{}
	if c.Name() != "proto" {
		t.Fatalf("Name = %q: it must replace gRPC's proto codec", c.Name())
	}
	gotSlice, err := c.Marshal(&frame{data: notProto})
	got := gotSlice.Materialize()
	if err != nil || !bytes.Equal(got, notProto) {
		t.Fatalf("Marshal(frame) = %x, %v; want the frame's bytes", got, err)
	}

	src := bytes.Clone(notProto)
	var f frame
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(src)}, &f); err != nil {
		t.Fatal(err)
	}
	src[0] = 0 // gRPC may reuse its buffer once Unmarshal returns
	if !bytes.Equal(f.data, notProto) {
		t.Fatalf("frame holds %x after its source changed, want a copy %x", f.data, notProto)
	}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{1})}, &f); err != nil || !bytes.Equal(f.data, []byte{1}) {
		t.Fatalf("reused frame holds %x, %v; want 01", f.data, err)
	}

	msg := &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}
	bSlice, err := c.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	b := bSlice.Materialize()
	if want, _ := proto.Marshal(msg); !bytes.Equal(b, want) {
		t.Fatalf("Marshal(proto) = %x, want %x", b, want)
	}
	var back healthpb.HealthCheckResponse
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &back); err != nil || back.GetStatus() != msg.GetStatus() {
		t.Fatalf("Unmarshal(proto) = %v, %v", &back, err)
	}

	if _, err := c.Marshal("a string"); status.Code(err) != codes.Internal {
		t.Fatalf("Marshal(string): %v, want Internal", err)
	}
	var s string
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &s); status.Code(err) != codes.Internal {
		t.Fatalf("Unmarshal into *string: %v, want Internal", err)
	}
}

// rawBackend is the master's side in the proxy tests: it serves any
// method as raw frames and records what it received.
type rawBackend struct {
	mu          sync.Mutex
	got         [][]byte
	md          metadata.MD
	hasDeadline bool
}

func (b *rawBackend) handle(_ any, ss grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(ss)
	md, _ := metadata.FromIncomingContext(ss.Context())
	_, dl := ss.Context().Deadline()
	b.mu.Lock()
	b.md, b.hasDeadline = md, dl
	b.mu.Unlock()
	if method == "/test.Raw/Fail" {
		ss.SetTrailer(metadata.Pairs("why", "asked to"))
		return status.Error(codes.NotFound, "no such thing")
	}
	if err := ss.SendHeader(metadata.Pairs("hdr", "h1")); err != nil {
		return err
	}
	ss.SetTrailer(metadata.Pairs("trl", "t1"))
	for {
		f := &frame{}
		err := ss.RecvMsg(f)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		b.mu.Lock()
		b.got = append(b.got, bytes.Clone(f.data))
		b.mu.Unlock()
		// Answer with the bytes reversed: not an echo the proxy could fake.
		if err := ss.SendMsg(&frame{data: reversed(f.data)}); err != nil {
			return err
		}
	}
}

func reversed(b []byte) []byte {
	out := bytes.Clone(b)
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// serve starts srv on an in-memory listener and returns a client of it,
// dialled with opts.
func serve(t *testing.T, srv *grpc.Server, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient("passthrough:///bufnet", append([]grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// proxySetup is a backend (the master, serving raw frames and the health
// service) behind a front server (a tablet server forwarding what it does
// not serve), and a client of the front.
func proxySetup(t *testing.T, target func(ctx context.Context) (grpc.ClientConnInterface, error)) (*rawBackend, *grpc.ClientConn) {
	t.Helper()
	b := &rawBackend{}
	back := grpc.NewServer(grpc.ForceServerCodecV2(proxyCodec{}), grpc.UnknownServiceHandler(b.handle))
	hs := health.NewServer()
	hs.SetServingStatus("backend", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(back, hs)
	backCC := serve(t, back)
	if target == nil {
		target = func(context.Context) (grpc.ClientConnInterface, error) { return backCC, nil }
	}
	front := grpc.NewServer(grpc.ForceServerCodecV2(proxyCodec{}), grpc.UnknownServiceHandler(forwardUnknown(target, false)))
	return b, serve(t, front)
}

func TestForwardUnknownUnaryBytes(t *testing.T) {
	b, cc := proxySetup(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-caller", "me")
	var out frame
	var hdr, trl metadata.MD
	if err := cc.Invoke(ctx, "/test.Raw/Echo", &frame{data: notProto}, &out, grpc.ForceCodecV2(proxyCodec{}), grpc.Header(&hdr), grpc.Trailer(&trl)); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.got) != 1 || !bytes.Equal(b.got[0], notProto) {
		t.Fatalf("backend received %x, want exactly %x", b.got, notProto)
	}
	if !bytes.Equal(out.data, reversed(notProto)) {
		t.Fatalf("client received %x, want exactly %x", out.data, reversed(notProto))
	}
	if got := b.md.Get("x-caller"); len(got) != 1 || got[0] != "me" {
		t.Fatalf("backend saw metadata %v, want the caller's x-caller", b.md)
	}
	if !b.hasDeadline {
		t.Fatal("the caller's deadline did not reach the backend")
	}
	if got := hdr.Get("hdr"); len(got) != 1 || got[0] != "h1" {
		t.Fatalf("header %v, want the backend's", hdr)
	}
	if got := trl.Get("trl"); len(got) != 1 || got[0] != "t1" {
		t.Fatalf("trailer %v, want the backend's", trl)
	}
}

func TestForwardUnknownStream(t *testing.T) {
	b, cc := proxySetup(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/test.Raw/Chat", grpc.ForceCodecV2(proxyCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	sent := [][]byte{notProto, {}, bytes.Repeat([]byte{0xab, 0xcd}, 100_000)}
	for _, m := range sent {
		if err := cs.SendMsg(&frame{data: m}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var got [][]byte
	for {
		f := &frame{}
		err := cs.RecvMsg(f)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, f.data)
	}
	if len(got) != len(sent) {
		t.Fatalf("received %d messages, want %d", len(got), len(sent))
	}
	for i := range sent {
		if !bytes.Equal(got[i], reversed(sent[i])) {
			t.Fatalf("message %d changed on the way back", i)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range sent {
		if !bytes.Equal(b.got[i], sent[i]) {
			t.Fatalf("message %d changed on the way to the backend", i)
		}
	}
	if got := cs.Trailer().Get("trl"); len(got) != 1 {
		t.Fatalf("trailer %v, want the backend's", cs.Trailer())
	}
}

func TestForwardUnknownStatus(t *testing.T) {
	_, cc := proxySetup(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var trl metadata.MD
	err := cc.Invoke(ctx, "/test.Raw/Fail", &frame{data: []byte{1}}, &frame{}, grpc.ForceCodecV2(proxyCodec{}), grpc.Trailer(&trl))
	if s := status.Convert(err); s.Code() != codes.NotFound || s.Message() != "no such thing" {
		t.Fatalf("err = %v, want the backend's NotFound", err)
	}
	if got := trl.Get("why"); len(got) != 1 {
		t.Fatalf("trailer %v, want the backend's", trl)
	}
}

// TestForwardUnknownProto: a client using ordinary protobuf messages (as
// the admin API's clients do) is answered through the proxy.
func TestForwardUnknownProto(t *testing.T) {
	_, cc := proxySetup(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: "backend"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("status %v, want the backend's NOT_SERVING", resp.GetStatus())
	}
}

func TestForwardUnknownNoTarget(t *testing.T) {
	_, cc := proxySetup(t, func(context.Context) (grpc.ClientConnInterface, error) {
		return nil, status.Error(codes.Unavailable, "no active master")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := cc.Invoke(ctx, "/test.Raw/Echo", &frame{data: []byte{1}}, &frame{}, grpc.ForceCodecV2(proxyCodec{}))
	if s := status.Convert(err); s.Code() != codes.Unavailable || s.Message() != "no active master" {
		t.Fatalf("err = %v, want Unavailable from the target", err)
	}
}

// TestForwardUnknownSendFails: when a caller's message cannot be forwarded
// to the master (here it exceeds the forwarding connection's send limit,
// which leaves the forwarded call open), the call fails at once with that
// error. The backend, waiting for more messages or the end of them, would
// otherwise keep the call open until the caller's deadline.
func TestForwardUnknownSendFails(t *testing.T) {
	b := &rawBackend{}
	back := grpc.NewServer(grpc.ForceServerCodecV2(proxyCodec{}), grpc.UnknownServiceHandler(b.handle))
	backCC := serve(t, back, grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(1<<10)))
	front := grpc.NewServer(grpc.ForceServerCodecV2(proxyCodec{}), grpc.UnknownServiceHandler(forwardUnknown(
		func(context.Context) (grpc.ClientConnInterface, error) { return backCC, nil }, false)))
	cc := serve(t, front)

	// A deadline the call must not reach.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/test.Raw/Chat", grpc.ForceCodecV2(proxyCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(&frame{data: []byte{1}}); err != nil {
		t.Fatal(err)
	}
	var f frame
	if err := cs.RecvMsg(&f); err != nil || !bytes.Equal(f.data, []byte{1}) {
		t.Fatalf("first answer %x, %v", f.data, err)
	}
	if err := cs.SendMsg(&frame{data: make([]byte, 4<<10)}); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	err = cs.RecvMsg(&f)
	if code := status.Code(err); code != codes.ResourceExhausted {
		t.Fatalf("call ended with %v (%v), want the forwarding error's ResourceExhausted", code, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.got) != 1 {
		t.Fatalf("backend received %d messages, want 1", len(b.got))
	}
}

// TestForwardUnknownRecvFails: when receiving the caller's messages fails
// (one exceeds the front server's limit), the forwarded call ends at once
// and the handler fails with that error, not with the cancellation of the
// forwarded call that follows, and not at the caller's deadline.
func TestForwardUnknownRecvFails(t *testing.T) {
	b := &rawBackend{}
	back := grpc.NewServer(grpc.ForceServerCodecV2(proxyCodec{}), grpc.UnknownServiceHandler(b.handle))
	backCC := serve(t, back)
	fwd := forwardUnknown(func(context.Context) (grpc.ClientConnInterface, error) { return backCC, nil }, false)
	handled := make(chan error, 1)
	front := grpc.NewServer(grpc.MaxRecvMsgSize(1<<10), grpc.ForceServerCodecV2(proxyCodec{}),
		grpc.UnknownServiceHandler(func(srv any, ss grpc.ServerStream) error {
			err := fwd(srv, ss)
			handled <- err
			return err
		}))
	cc := serve(t, front)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/test.Raw/Chat", grpc.ForceCodecV2(proxyCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(&frame{data: []byte{1}}); err != nil {
		t.Fatal(err)
	}
	var f frame
	if err := cs.RecvMsg(&f); err != nil || !bytes.Equal(f.data, []byte{1}) {
		t.Fatalf("first answer %x, %v", f.data, err)
	}
	if err := cs.SendMsg(&frame{data: make([]byte, 4<<10)}); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	err = cs.RecvMsg(&f)
	if code := status.Code(err); code != codes.ResourceExhausted {
		t.Fatalf("call ended with %v (%v), want ResourceExhausted", code, err)
	}
	select {
	case err := <-handled:
		if code := status.Code(err); code != codes.ResourceExhausted {
			t.Fatalf("handler returned %v (%v), want the receive error's ResourceExhausted", code, err)
		}
	case <-ctx.Done():
		t.Fatal("the handler is still forwarding at the caller's deadline")
	}
}
