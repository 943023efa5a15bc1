package cluster

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// frame is a message forwarded without decoding.
type frame struct{ data []byte }

// proxyCodec passes frames through as raw bytes and everything else to
// protobuf, so that one server can both serve its own services and forward
// the rest (the admin API, to the master) untouched.
type proxyCodec struct{}

func (proxyCodec) Marshal(v any) ([]byte, error) {
	if f, ok := v.(*frame); ok {
		return f.data, nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return nil, status.Errorf(codes.Internal, "cluster: cannot encode %T", v)
	}
	return proto.Marshal(m)
}

func (proxyCodec) Unmarshal(data []byte, v any) error {
	if f, ok := v.(*frame); ok {
		f.data = append(f.data[:0], data...)
		return nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "cluster: cannot decode into %T", v)
	}
	return proto.Unmarshal(data, m)
}

func (proxyCodec) Name() string { return "proto" }

var _ encoding.Codec = proxyCodec{}

// forwardUnknown returns a grpc.UnknownServiceHandler that forwards every
// call of a service this server does not serve to the connection target
// returns (the active master), frame by frame, with the caller's metadata
// and deadline.
func forwardUnknown(target func(ctx context.Context) (grpc.ClientConnInterface, error)) grpc.StreamHandler {
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
			ctx = metadata.NewOutgoingContext(ctx, md.Copy())
		}
		cs, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method, grpc.ForceCodec(proxyCodec{}))
		if err != nil {
			return err
		}
		// Caller → master.
		upErr := make(chan error, 1)
		go func() {
			for {
				f := &frame{}
				if err := ss.RecvMsg(f); err != nil {
					if errors.Is(err, io.EOF) {
						upErr <- cs.CloseSend()
						return
					}
					upErr <- err
					return
				}
				if err := cs.SendMsg(f); err != nil {
					upErr <- err
					return
				}
			}
		}()
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
