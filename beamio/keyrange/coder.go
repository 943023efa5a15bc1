package keyrange

import (
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/coder"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/runtime"
)

// The restriction travels between the SDK and the runner (initial
// splits, dynamic split residuals) with its own compact coder: three
// uvarint-length-prefixed fields.
func init() {
	runtime.RegisterType(reflect.TypeOf((*Tracker)(nil)))
	runtime.RegisterType(reflect.TypeOf((*Restriction)(nil)).Elem())
	runtime.RegisterFunction(EncodeRestriction)
	runtime.RegisterFunction(DecodeRestriction)
	coder.RegisterCoder(reflect.TypeOf((*Restriction)(nil)).Elem(), EncodeRestriction, DecodeRestriction)
}

// EncodeRestriction encodes r as uvarint len(Start), Start, uvarint
// len(End), End, varint Bytes.
func EncodeRestriction(r Restriction) ([]byte, error) {
	out := make([]byte, 0, len(r.Start)+len(r.End)+3*binary.MaxVarintLen64)
	out = binary.AppendUvarint(out, uint64(len(r.Start)))
	out = append(out, r.Start...)
	out = binary.AppendUvarint(out, uint64(len(r.End)))
	out = append(out, r.End...)
	out = binary.AppendVarint(out, r.Bytes)
	return out, nil
}

// errCorrupt is wrapped by every DecodeRestriction error.
var errCorrupt = errors.New("keyrange: corrupt restriction encoding")

// DecodeRestriction decodes what EncodeRestriction wrote; trailing or
// missing bytes are an error.
func DecodeRestriction(b []byte) (Restriction, error) {
	var r Restriction
	field := func(name string) ([]byte, error) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, fmt.Errorf("%w: %s length", errCorrupt, name)
		}
		v := b[k : k+int(n)]
		b = b[k+int(n):]
		return append([]byte(nil), v...), nil
	}
	var err error
	if r.Start, err = field("start"); err != nil {
		return Restriction{}, err
	}
	if r.End, err = field("end"); err != nil {
		return Restriction{}, err
	}
	v, k := binary.Varint(b)
	if k <= 0 {
		return Restriction{}, fmt.Errorf("%w: bytes", errCorrupt)
	}
	if k != len(b) {
		return Restriction{}, fmt.Errorf("%w: %d trailing bytes", errCorrupt, len(b)-k)
	}
	r.Bytes = v
	return r, nil
}
