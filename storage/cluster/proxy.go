package cluster

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/internal/bufpool"
	"github.com/tabuladb/tabula/security/auth"
	"github.com/tabuladb/tabula/storage/tabletserver"
)

// frame is a message forwarded without decoding.
type frame struct{ data []byte }

// proxyCodec passes frames through as raw bytes and everything else to
// protobuf, so that one server can both serve its own services and forward
// the rest (the admin API, to the master) untouched.
type proxyCodec struct{}

func (proxyCodec) Marshal(v any) (mem.BufferSlice, error) {
	if f, ok := v.(*frame); ok {
		return mem.BufferSlice{mem.SliceBuffer(f.data)}, nil
	}
	if _, ok := v.(proto.Message); !ok {
		if !tabletserver.IsRaw(v) {
			return nil, status.Errorf(codes.Internal, "cluster: cannot encode %T", v)
		}
	}
	// The tablet server's codec: ReadRows responses encoded without
	// copying their values (tabletserver.ServerCodec), the gateway's
	// relayed ones as received, the rest as proto.
	return tabletserver.Codec().Marshal(v)
}

func (proxyCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if f, ok := v.(*frame); ok {
		// A fresh buffer per frame: the previous one may still be on
		// its way out through the transport.
		f.data = bufpool.Materialize(data)
		return nil
	}
	if _, ok := v.(proto.Message); !ok && !tabletserver.IsRaw(v) {
		return status.Errorf(codes.Internal, "cluster: cannot decode into %T", v)
	}
	return tabletserver.Codec().Unmarshal(data, v)
}

func (proxyCodec) Name() string { return "proto" }

var _ encoding.CodecV2 = proxyCodec{}

// forwardUnknown returns a grpc.UnknownServiceHandler that forwards every
// call of a service this server does not serve to the connection target
// returns (the active master), frame by frame, with the caller's metadata
// and deadline.
//
// ownCredentials: the target connection sends this server's own token
// (AuthConfig.ServerToken), so the caller's authorization header is not
// passed on (the caller's identity is, stated by the guard).
func forwardUnknown(target func(ctx context.Context) (grpc.ClientConnInterface, error), ownCredentials bool) grpc.StreamHandler {
	return func(_ any, ss grpc.ServerStream) error {
		method, ok := grpc.MethodFromServerStream(ss)
		if !ok {
			return status.Error(codes.Internal, "cluster: no method on the stream")
		}
		ctx, cancel := context.WithCancel(ss.Context())
		defer cancel()
		cc, err := target(ctx)
		if err != nil {
			return err
		}
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			md = md.Copy()
			if ownCredentials {
				md.Delete(auth.AuthorizationKey)
			}
			ctx = metadata.NewOutgoingContext(ctx, md)
		}
		cs, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method, grpc.ForceCodecV2(proxyCodec{}))
		if err != nil {
			return err
		}
		// Caller → master. A failure other than the caller's end of
		// messages (io.EOF, passed on as CloseSend) ends the forwarded call
		// at once, and the call fails with it: the master, never told that
		// the messages ended, would otherwise keep the call open until the
		// caller's deadline. (gRPC happens to end the stream itself after
		// most such failures; this does not rely on it.) An io.EOF from
		// SendMsg is the master ending the call: its status comes from
		// RecvMsg below.
		upErr := make(chan error, 1)
		go func() {
			err := forwardUp(ss, cs)
			upErr <- err
			if err != nil {
				cancel()
			}
		}()
		// upFailed returns the error that ended the forwarding to the
		// master, if it failed; with wait, once that forwarding ended.
		upFailed := func(wait bool) error {
			if wait {
				err := <-upErr
				upErr <- err // for a later look
				return err
			}
			select {
			case err := <-upErr:
				upErr <- err
				return err
			default:
				return nil
			}
		}
		// Master → caller.
		first := true
		for {
			f := &frame{}
			if err := cs.RecvMsg(f); err != nil {
				if first {
					if md, err := cs.Header(); err == nil {
						_ = ss.SetHeader(md)
					}
				}
				ss.SetTrailer(cs.Trailer())
				// A forwarded call cancelled — by the forwarding up, which
				// failed, or with the caller's stream — ends that
				// forwarding too, soon: wait for it, since its failure is
				// the call's. A caller's message over the limit fails the
				// receive and ends the caller's stream at once, and that
				// cancellation could reach RecvMsg here first.
				if upErr := upFailed(ctx.Err() != nil); upErr != nil {
					return upErr
				}
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
			if first {
				if md, err := cs.Header(); err == nil {
					_ = ss.SendHeader(md)
				}
				first = false
			}
			if err := ss.SendMsg(f); err != nil {
				return err
			}
		}
	}
}

// forwardUp sends the caller's messages on ss to the master on cs until the
// caller's end of messages, which it passes on (CloseSend), or the master's
// end of the call; it returns any other failure.
func forwardUp(ss grpc.ServerStream, cs grpc.ClientStream) error {
	for {
		f := &frame{}
		if err := ss.RecvMsg(f); err != nil {
			if errors.Is(err, io.EOF) {
				return cs.CloseSend()
			}
			return err
		}
		if err := cs.SendMsg(f); err != nil {
			if errors.Is(err, io.EOF) {
				return nil // the master ended the call; RecvMsg has its status
			}
			return err
		}
	}
}
