package cluster

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/cluster/clusterpb"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletserver"
)

// tabletOpsService is a tablet server's TabletOps: the forced split and
// compaction of one tablet, which the active master asks for on an
// operator's request (masterTabletOps).
type tabletOpsService struct {
	clusterpb.UnimplementedTabletOpsServer
	s *TabletServer
}

func (o *tabletOpsService) SplitTablet(ctx context.Context, req *clusterpb.SplitTabletRequest) (*clusterpb.SplitTabletResponse, error) {
	id, err := parseTableString(req.GetTable())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "table: %v", err)
	}
	children, err := o.s.host.SplitTabletAt(ctx, id, req.GetTabletId(), nilIfEmpty(req.GetSplitKey()))
	if err != nil {
		return nil, opStatus("splitting tablet "+req.GetTabletId(), err)
	}
	resp := &clusterpb.SplitTabletResponse{}
	for _, c := range children {
		resp.Children = append(resp.Children, &clusterpb.ServedTablet{Table: req.GetTable(), TabletId: c.ID, StartKey: c.Start, EndKey: c.End, Bytes: c.Bytes})
	}
	o.s.log.Info("tablet split on request", "tablet", req.GetTabletId(), "children", len(children))
	return resp, nil
}

func (o *tabletOpsService) CompactTablet(ctx context.Context, req *clusterpb.CompactTabletRequest) (*clusterpb.CompactTabletResponse, error) {
	id, err := parseTableString(req.GetTable())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "table: %v", err)
	}
	if err := o.s.host.CompactTablet(ctx, id, req.GetTabletId(), req.GetMajor()); err != nil {
		return nil, opStatus("compacting tablet "+req.GetTabletId(), err)
	}
	return &clusterpb.CompactTabletResponse{}, nil
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// opStatus maps the Host's errors of a forced operation to statuses.
func opStatus(what string, err error) error {
	switch {
	case errors.Is(err, tabletserver.ErrTabletNotHere), errors.Is(err, tabletserver.ErrTableNotFound):
		return status.Errorf(codes.NotFound, "%s: %v", what, err)
	case errors.Is(err, tablet.ErrCannotSplit):
		return status.Errorf(codes.FailedPrecondition, "%s: %v", what, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return status.FromContextError(err).Err()
	}
	return status.Errorf(codes.Unavailable, "%s: %v", what, err)
}
