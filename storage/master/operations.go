package master

import (
	"context"
	"sync"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// maxOperations bounds the finished operations kept for GetOperation.
const maxOperations = 1000

// operations keeps the most recent long-running operations the admin
// service returned, so that google.longrunning.Operations.GetOperation
// answers for them. Tabula finishes every operation before returning it,
// so clients that honour Operation.done never poll; this is for those that
// poll anyway.
type operations struct {
	longrunningpb.UnimplementedOperationsServer
	mu    sync.Mutex
	ops   map[string]*longrunningpb.Operation
	order []string // oldest first
}

func (o *operations) add(op *longrunningpb.Operation) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ops == nil {
		o.ops = make(map[string]*longrunningpb.Operation)
	}
	_, known := o.ops[op.Name]
	o.ops[op.Name] = proto.Clone(op).(*longrunningpb.Operation)
	if known {
		return // an update of a running operation (RestoreTable's progress)
	}
	o.order = append(o.order, op.Name)
	if len(o.order) > maxOperations {
		delete(o.ops, o.order[0])
		o.order = o.order[1:]
	}
}

// GetOperation returns a recent operation; NOT_FOUND for one that is
// unknown or was forgotten (only the last 1000 are kept).
func (o *operations) GetOperation(_ context.Context, req *longrunningpb.GetOperationRequest) (*longrunningpb.Operation, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	op, ok := o.ops[req.GetName()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "operation %q not found (Tabula keeps the last %d)", req.GetName(), maxOperations)
	}
	return proto.Clone(op).(*longrunningpb.Operation), nil
}
