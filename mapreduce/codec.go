package mapreduce

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"math"

	"github.com/tabuladb/tabula/storage/cell"
)

// Codec converts a Go type to and from the bytes that keys and values are
// at the core. A key codec must preserve order (bytes.Compare of two
// encodings orders them as their values) for the reduce side to see keys
// in their natural order; all codecs here do.
type Codec[T any] interface {
	Append(dst []byte, v T) []byte
	Decode(b []byte) (T, error)
}

// String, Bytes and Int64 are the codecs of common key and value types.
var (
	String Codec[string] = stringCodec{}
	Bytes  Codec[[]byte] = bytesCodec{}
	Int64  Codec[int64]  = int64Codec{}
)

type stringCodec struct{}

func (stringCodec) Append(dst []byte, v string) []byte { return append(dst, v...) }
func (stringCodec) Decode(b []byte) (string, error)    { return string(b), nil }

type bytesCodec struct{}

func (bytesCodec) Append(dst []byte, v []byte) []byte { return append(dst, v...) }
func (bytesCodec) Decode(b []byte) ([]byte, error)    { return b, nil }

// int64Codec is 8 bytes big-endian with the sign bit flipped, so that
// negative numbers sort before positive ones.
type int64Codec struct{}

func (int64Codec) Append(dst []byte, v int64) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(v)^(1<<63))
}

func (int64Codec) Decode(b []byte) (int64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("mapreduce: int64 value of %d bytes, want 8", len(b))
	}
	return int64(binary.BigEndian.Uint64(b) ^ (1 << 63)), nil
}

// Float64 is an order-preserving codec of float64 (NaN sorts last).
var Float64 Codec[float64] = float64Codec{}

type float64Codec struct{}

func (float64Codec) Append(dst []byte, v float64) []byte {
	u := math.Float64bits(v)
	if u>>63 == 1 {
		u = ^u
	} else {
		u |= 1 << 63
	}
	return binary.BigEndian.AppendUint64(dst, u)
}

func (float64Codec) Decode(b []byte) (float64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("mapreduce: float64 value of %d bytes, want 8", len(b))
	}
	u := binary.BigEndian.Uint64(b)
	if u>>63 == 1 {
		u &^= 1 << 63
	} else {
		u = ^u
	}
	return math.Float64frombits(u), nil
}

// TypedMap adapts a map function over typed keys and values: emit encodes
// them with kc and vc.
func TypedMap[K, V any](kc Codec[K], vc Codec[V], f func(ctx context.Context, row cell.Row, emit func(K, V) error, out MapContext) error) func(context.Context, cell.Row, MapContext) error {
	return func(ctx context.Context, row cell.Row, out MapContext) error {
		var kb, vb []byte
		emit := func(k K, v V) error {
			kb, vb = kc.Append(kb[:0], k), vc.Append(vb[:0], v)
			return out.Emit(kb, vb)
		}
		return f(ctx, row, emit, out)
	}
}

// TypedReduce adapts a reduce function over typed keys and values. A value
// that does not decode fails the task.
func TypedReduce[K, V any](kc Codec[K], vc Codec[V], f func(ctx context.Context, key K, values iter.Seq[V], out ReduceContext) error) func(context.Context, []byte, iter.Seq[[]byte], ReduceContext) error {
	return func(ctx context.Context, key []byte, values iter.Seq[[]byte], out ReduceContext) error {
		k, err := kc.Decode(key)
		if err != nil {
			return fmt.Errorf("key %q: %w", key, err)
		}
		var derr error
		typed := func(yield func(V) bool) {
			for b := range values {
				v, err := vc.Decode(b)
				if err != nil {
					derr = fmt.Errorf("value of key %q: %w", key, err)
					return
				}
				if !yield(v) {
					return
				}
			}
		}
		if err := f(ctx, k, typed, out); err != nil {
			return err
		}
		return derr
	}
}

// TypedCombine adapts a combiner over typed values.
func TypedCombine[K, V any](kc Codec[K], vc Codec[V], f func(key K, values iter.Seq[V], emit func(V) error) error) func([]byte, iter.Seq[[]byte], func([]byte) error) error {
	return func(key []byte, values iter.Seq[[]byte], emit func([]byte) error) error {
		k, err := kc.Decode(key)
		if err != nil {
			return fmt.Errorf("key %q: %w", key, err)
		}
		var derr error
		typed := func(yield func(V) bool) {
			for b := range values {
				v, err := vc.Decode(b)
				if err != nil {
					derr = fmt.Errorf("value of key %q: %w", key, err)
					return
				}
				if !yield(v) {
					return
				}
			}
		}
		var vb []byte
		err = f(k, typed, func(v V) error { vb = vc.Append(vb[:0], v); return emit(vb) })
		return errors.Join(err, derr)
	}
}
