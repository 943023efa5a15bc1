package gateway

import (
	"context"
	"strings"
	"testing"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/storage/filter"
	"github.com/tabuladb/tabula/storage/tabletserver"
)

// relayedRows is a ReadRows server stream that decodes what the gateway
// relays to it — responses, and wire-form responses from another server
// — and collects the keys of the rows committed.
type relayedRows struct {
	grpc.ServerStream
	t    *testing.T
	ctx  context.Context
	cur  []byte
	keys []string
}

func (s *relayedRows) Context() context.Context { return s.ctx }

func (s *relayedRows) Send(resp *bigtablepb.ReadRowsResponse) error {
	b, err := proto.Marshal(resp)
	if err != nil {
		return err
	}
	return s.scan(b)
}

func (s *relayedRows) SendMsg(m any) error {
	enc, ok := m.(*tabletserver.EncodedReadRows)
	if !ok {
		s.t.Fatalf("relayed %T", m)
	}
	return s.scan(enc.Bytes())
}

func (s *relayedRows) scan(b []byte) error {
	var resp bigtablepb.ReadRowsResponse
	if err := proto.Unmarshal(b, &resp); err != nil {
		return err
	}
	for _, ch := range resp.Chunks {
		if len(ch.RowKey) > 0 {
			s.cur = ch.RowKey
		}
		if ch.GetCommitRow() {
			s.keys = append(s.keys, string(s.cur))
		}
	}
	return nil
}

// TestRelayedLocalPartIgnoresRowTaker: a ReadRows the gateway splits over
// its own tablets and another server's relays the local part's rows too,
// as responses counted against the limit — a RowTaker in the caller's
// context (a session's, storage/datasession) does not take them.
func TestRelayedLocalPartIgnoresRowTaker(t *testing.T) {
	c := newGWCluster(t)
	gwFill(t, c)
	taken := 0
	ctx := tabletserver.WithRowTaker(c.ctx, func([]byte, []filter.LabeledCell) error {
		taken++
		return nil
	})
	for _, limit := range []int64{0, 6} {
		out := &relayedRows{t: t, ctx: ctx}
		req := &bigtablepb.ReadRowsRequest{TableName: tableName(gwTable), RowsLimit: limit}
		if err := c.a.gw.ReadRows(req, out); err != nil {
			t.Fatal(err)
		}
		want := gwRows
		if limit > 0 {
			want = gwRows[:limit]
		}
		if got := strings.Join(out.keys, " "); got != strings.Join(want, " ") {
			t.Errorf("limit %d: relayed %q, want %q", limit, got, strings.Join(want, " "))
		}
	}
	if taken != 0 {
		t.Errorf("the taker took %d rows of a relayed read", taken)
	}
	if c.a.requests("ReadRows", routeForwarded) == 0 {
		t.Error("nothing was forwarded: the read did not span both servers")
	}
}
