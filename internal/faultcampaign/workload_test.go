package faultcampaign

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/client"
)

// TestDefinitelyNotApplied: a refusal proves a write was not applied only
// when no earlier attempt of it may have been.
func TestDefinitelyNotApplied(t *testing.T) {
	notServing := status.Error(codes.FailedPrecondition, "tablet i/hot: not serving: moved")
	noTablet := status.Error(codes.Unavailable, "tablet i/hot: not serving: no tablet of the table is served here")
	lost := status.Error(codes.Unavailable, "error reading from server: EOF")
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"not serving", notServing, true},
		{"no tablet served", noTablet, true},
		{"connection lost after sending", lost, false},
		{"deadline", status.Error(codes.DeadlineExceeded, "context deadline exceeded"), false},
		{"invalid argument", status.Error(codes.InvalidArgument, "row key too long"), true},
		{"Tabula client: an earlier attempt may have applied it", &client.OutcomeUnknownError{Earlier: lost, Last: notServing}, false},
		{"official client retried: refused at last", &retriedWrite{noTablet}, false},
		{"official client retried: invalid", &retriedWrite{status.Error(codes.InvalidArgument, "bad")}, true},
	} {
		if got := definitelyNotApplied(c.err); got != c.want {
			t.Errorf("%s (%v): definitelyNotApplied = %v, want %v", c.name, c.err, got, c.want)
		}
	}
	if !errors.Is(&client.OutcomeUnknownError{Earlier: lost, Last: notServing}, client.ErrOutcomeUnknown) {
		t.Fatal("OutcomeUnknownError does not match ErrOutcomeUnknown")
	}
}
