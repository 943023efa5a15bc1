package master

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/cell"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tablet"
	"github.com/tabuladb/tabula/storage/tabletdesc"
)

// invalidArg is an INVALID_ARGUMENT status naming the offending field, as
// Cloud Bigtable's messages do.
func invalidArg(field, format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, "%s: %s", field, fmt.Sprintf(format, args...))
}

// unimplemented is an UNIMPLEMENTED status for a field of the Cloud API
// that Tabula does not support: silently ignoring it would mislead.
func unimplemented(field, what string) error {
	return status.Errorf(codes.Unimplemented, "%s: %s is not supported by Tabula", field, what)
}

// toStatus turns an error of the catalog, the tablets or the tablet
// control into a gRPC status error. Status errors pass unchanged.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var inv *cell.InvalidArgumentError
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, meta.ErrTableNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, meta.ErrTableExists):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, meta.ErrBadName), errors.As(err, &inv):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, tablet.ErrFamilyNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, tabletdesc.ErrNotServing):
		return status.Error(codes.Unavailable, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}
