package master

import (
	"fmt"

	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/storage/cell"
)

// familyType checks a column family's value_type and returns the family's
// aggregator (cell.NoAggregator for a type that is not an aggregate) and
// the type's wire bytes to keep (nil when vt is nil).
//
// An aggregate type must have Int64 input in big-endian bytes (the encoding
// may be left unset: it is the only one Tabula reads) and one of the Sum,
// Min, Max and HyperLogLogPlusPlusUniqueCount aggregators; its state_type
// is output only and ignored. A type that is not an aggregate is kept as a
// declaration, as Cloud Bigtable does: cells of such a family are written
// and read as bytes.
func familyType(field string, vt *adminpb.Type) (cell.Aggregator, []byte, error) {
	if vt == nil {
		return cell.NoAggregator, nil, nil
	}
	if vt.GetKind() == nil {
		return 0, nil, invalidArg(field, "a value_type must set a kind")
	}
	agg := cell.NoAggregator
	if at := vt.GetAggregateType(); at != nil {
		f := field + ".aggregate_type"
		in := at.GetInputType()
		if in == nil {
			return 0, nil, invalidArg(f+".input_type", "an aggregate needs an input_type (Int64)")
		}
		i64 := in.GetInt64Type()
		if i64 == nil {
			return 0, nil, invalidArg(f+".input_type", "Tabula's aggregates take Int64 input, got %T", in.GetKind())
		}
		if enc := i64.GetEncoding(); enc != nil && enc.GetBigEndianBytes() == nil {
			return 0, nil, invalidArg(f+".input_type.int64_type.encoding", "Tabula's aggregates read Int64 input as big_endian_bytes, got %T", enc.GetEncoding())
		}
		switch at.GetAggregator().(type) {
		case *adminpb.Type_Aggregate_Sum_:
			agg = cell.Sum
		case *adminpb.Type_Aggregate_Min_:
			agg = cell.Min
		case *adminpb.Type_Aggregate_Max_:
			agg = cell.Max
		case *adminpb.Type_Aggregate_HllppUniqueCount:
			agg = cell.HLLUniqueCount
		case nil:
			return 0, nil, invalidArg(f+".aggregator", "one of sum, min, max or hllpp_unique_count must be set")
		default:
			return 0, nil, invalidArg(f+".aggregator", "unknown aggregator %T", at.GetAggregator())
		}
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(vt)
	if err != nil {
		return 0, nil, invalidArg(field, "%v", err)
	}
	return agg, b, nil
}

// valueTypeProto decodes a family's stored value_type; nil when it has none.
func valueTypeProto(b []byte) *adminpb.Type {
	if b == nil {
		return nil
	}
	vt := &adminpb.Type{}
	if err := proto.Unmarshal(b, vt); err != nil {
		// The bytes were marshalled by familyType: a failure here is
		// a damaged catalog entry, answered as an untyped family.
		return nil
	}
	return vt
}

// errImmutableAggregate is Cloud Bigtable's answer (and its emulator's) to
// changing the value_type of an aggregate family, or giving an existing
// family an aggregate type: the cells already written could not be read
// as the new type.
func errImmutableAggregate(field string) error {
	return status.Error(codes.InvalidArgument, fmt.Sprintf("%s: Immutable fields 'value_type.aggregate_type' cannot be updated (a family's aggregate type is fixed when the family is created)", field))
}
