package client

import (
	"context"
	"fmt"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the codec requests go through
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tabuladb/tabula/internal/bufpool"
	"github.com/tabuladb/tabula/storage/cell"
)

// A scan's ReadRows responses are decoded here straight from the wire
// into rows: no CellChunk messages, and the values of a response alias
// the one buffer it arrived in (a copy gRPC makes anyway). Decoding
// through the generated messages and then merging their chunks cost a
// scan more CPU in the client than the server spent reading the rows.

// rawReadRows receives one ReadRowsResponse as its encoded bytes. When
// reusing (Options.ReuseScanBuffers), it goes into reuse if that is large
// enough, else into a fresh buffer with room to spare (responses vary a
// little in size: one of exactly the last's size would rarely fit the
// next); otherwise into a fresh buffer of its size.
type rawReadRows struct {
	buf, reuse []byte
	reusing    bool
}

// rawCodec hands ReadRowsResponses over undecoded (into a rawReadRows)
// and treats every other message as gRPC's proto codec does.
type rawCodec struct{}

func protoCodec() encoding.CodecV2 { return encoding.GetCodecV2("proto") }

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) { return protoCodec().Marshal(v) }

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*rawReadRows); ok {
		if !r.reusing {
			r.buf = bufpool.Materialize(data) // a fresh buffer the rows may alias
			return nil
		}
		n := data.Len()
		if cap(r.reuse) >= n {
			r.buf = r.reuse[:n]
		} else {
			r.buf = make([]byte, n, n+n/4)
		}
		data.CopyTo(r.buf)
		return nil
	}
	return protoCodec().Unmarshal(data, v)
}

var readRowsStream = grpc.StreamDesc{StreamName: "ReadRows", ServerStreams: true}

// readRowsMethod is the full name of the Bigtable service's ReadRows.
const readRowsMethod = "/google.bigtable.v2.Bigtable/ReadRows"

// openReadRows starts a ReadRows whose responses are read with
// RecvMsg(*rawReadRows).
func openReadRows(ctx context.Context, cc grpc.ClientConnInterface, req *bigtablepb.ReadRowsRequest) (grpc.ClientStream, error) {
	st, err := cc.NewStream(ctx, &readRowsStream, readRowsMethod, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		return nil, err
	}
	if err := st.SendMsg(req); err != nil {
		return nil, err
	}
	if err := st.CloseSend(); err != nil {
		return nil, err
	}
	return st, nil
}

// wireChunk is one CellChunk as decoded from the wire; its byte slices
// alias the response's buffer.
type wireChunk struct {
	rowKey           []byte
	family           []byte
	hasFamily        bool
	qualifier        []byte
	hasQualifier     bool
	timestamp        int64
	value            []byte
	valueSize        int32
	resetRow, commit bool
}

func malformedResponse(what string) error {
	return status.Errorf(codes.Internal, "client: malformed ReadRowsResponse: %s", what)
}

// addEncoded feeds the chunks of an encoded ReadRowsResponse to the
// merger and returns out with the rows they complete appended. Fields
// other than the chunks (last_scanned_row_key, request stats, fields of
// later versions) are skipped.
func (m *chunkMerger) addEncoded(b []byte, out []cell.Row) ([]cell.Row, error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, malformedResponse("bad tag")
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			chunk, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, malformedResponse("bad chunk")
			}
			b = b[n:]
			var c wireChunk
			if err := c.decode(chunk); err != nil {
				return nil, err
			}
			var err error
			if out, err = m.addChunk(&c, out); err != nil {
				return nil, err
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return nil, malformedResponse(fmt.Sprintf("bad field %d", num))
		}
		b = b[n:]
	}
	return out, nil
}

// decode parses one CellChunk.
func (c *wireChunk) decode(b []byte) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return malformedResponse("bad chunk tag")
		}
		b = b[n:]
		switch {
		case typ == protowire.BytesType && num <= 3 || typ == protowire.BytesType && num == 6:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return malformedResponse("bad chunk field")
			}
			b = b[n:]
			switch num {
			case 1:
				c.rowKey = v
			case 2:
				c.hasFamily = true
				if c.family, n = wrapperValue(v); n < 0 {
					return malformedResponse("bad family_name")
				}
			case 3:
				c.hasQualifier = true
				if c.qualifier, n = wrapperValue(v); n < 0 {
					return malformedResponse("bad qualifier")
				}
			case 6:
				c.value = v
			}
		case typ == protowire.VarintType && (num == 4 || num == 7 || num == 8 || num == 9):
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return malformedResponse("bad chunk varint")
			}
			b = b[n:]
			switch num {
			case 4:
				c.timestamp = int64(v)
			case 7:
				c.valueSize = int32(v)
			case 8:
				c.resetRow = v != 0
			case 9:
				c.commit = v != 0
			}
		default: // labels, and fields this client does not know
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return malformedResponse("bad chunk field")
			}
			b = b[n:]
		}
	}
	return nil
}

// wrapperValue returns the value of an encoded StringValue or BytesValue
// (field 1; nil when absent, as the generated message decodes it); n < 0
// when malformed.
func wrapperValue(b []byte) (v []byte, n int) {
	for len(b) > 0 {
		num, typ, m := protowire.ConsumeTag(b)
		if m < 0 {
			return nil, -1
		}
		b = b[m:]
		if num == 1 && typ == protowire.BytesType {
			x, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return nil, -1
			}
			v, b = x, b[m:]
			continue
		}
		m = protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return nil, -1
		}
		b = b[m:]
	}
	return v, 0
}
