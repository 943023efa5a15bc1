package gateway

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/meta"
)

const (
	testProject  = "p"
	testInstance = "i"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func tableName(t string) string {
	return meta.TableID{Instance: testInstance, Table: t}.FullName(testProject)
}

func ts(ms int64) bigtable.Timestamp { return bigtable.Timestamp(ms * 1000) }

// formatRow renders a row as "key{fam:qual@ts=value ...}", families by
// name, cells in the order the client returns them.
func formatRow(r bigtable.Row) string {
	var cells []string
	for _, f := range slices.Sorted(func(yield func(string) bool) {
		for f := range r {
			if !yield(f) {
				return
			}
		}
	}) {
		for _, it := range r[f] {
			cells = append(cells, fmt.Sprintf("%s@%d=%s", it.Column, it.Timestamp, it.Value))
		}
	}
	return r.Key() + "{" + strings.Join(cells, " ") + "}"
}

// wantCode fails unless err is a gRPC status with code and a message
// containing every one of parts.
func wantCode(t *testing.T, err error, code codes.Code, parts ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("got error %v, want code %v", err, code)
	}
	for _, p := range parts {
		if msg := status.Convert(err).Message(); !strings.Contains(msg, p) {
			t.Fatalf("error %q does not mention %q", msg, p)
		}
	}
}
