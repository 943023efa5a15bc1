package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/cluster/clusterpb"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletdesc"
	"github.com/tabuladb/tabula/storage/tabletserver/tabletpb"
)

// metadataSource is the cluster's MetadataSource: the root's location from
// any tablet server's Locator service, METADATA rows by ReadRows from the
// server holding the METADATA tablet.
type metadataSource struct {
	entry grpc.ClientConnInterface
	dial  func(addr string) (grpc.ClientConnInterface, error)

	mu sync.Mutex
	// known are servers the locations read so far named, the most
	// recently seen last, at most maxKnownServers: where Root asks when
	// the entry server does not answer.
	known []string
}

// maxKnownServers bounds metadataSource.known.
const maxKnownServers = 16

// NewMetadataSource returns the MetadataSource of a cluster: Root asks the
// tablet server behind entry (clusterpb.Locator.GetRoot; a root not
// assigned yet is a location with Server "", which Locate reports as
// ErrUnassigned) — or, when that server is UNAVAILABLE (gone: a client
// outlives the server it entered by, as a long job does), the servers the
// locations read so far named, in turn — and ScanMetadata reads METADATA rows with ReadRows from
// the server holding the METADATA tablet, reached through
// dial(meta.ServerAddr(server)). dial is called for every scan: it should
// return a pooled connection.
//
// ScanMetadata reports as tabletdesc.ErrNotServing (so that Locate invalidates
// the METADATA tablet and goes up the hierarchy) a FAILED_PRECONDITION
// with a tabletpb.NotServing detail, UNAVAILABLE (the server is gone), and
// NOT_FOUND (the server does not hold METADATA at all: a restarted server
// at the same address); the gRPC status stays in the error's chain.
func NewMetadataSource(entry grpc.ClientConnInterface, dial func(addr string) (grpc.ClientConnInterface, error)) MetadataSource {
	return &metadataSource{entry: entry, dial: dial}
}

func (s *metadataSource) Root(ctx context.Context) (meta.Location, error) {
	l, err := rootFrom(ctx, s.entry)
	if status.Code(err) == codes.Unavailable {
		for _, server := range s.knownServers() {
			if ctx.Err() != nil {
				break
			}
			cc, derr := s.dial(meta.ServerAddr(server))
			if derr != nil {
				continue
			}
			if other, oerr := rootFrom(ctx, cc); oerr == nil {
				l, err = other, nil
				break
			}
		}
	}
	if err == nil {
		s.saw(l)
	}
	return l, err
}

// knownServers returns the servers locations named, newest first.
func (s *metadataSource) knownServers() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.known)
	slices.Reverse(out)
	return out
}

// saw records the servers of locations read.
func (s *metadataSource) saw(ls ...meta.Location) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range ls {
		if l.Server == "" {
			continue
		}
		if i := slices.Index(s.known, l.Server); i >= 0 {
			s.known = slices.Delete(s.known, i, i+1)
		}
		s.known = append(s.known, l.Server)
		if len(s.known) > maxKnownServers {
			s.known = slices.Delete(s.known, 0, 1)
		}
	}
}

// rootFrom asks the tablet server behind cc for the root's location.
func rootFrom(ctx context.Context, cc grpc.ClientConnInterface) (meta.Location, error) {
	resp, err := clusterpb.NewLocatorClient(cc).GetRoot(ctx, &clusterpb.GetRootRequest{})
	if err != nil {
		return meta.Location{}, err
	}
	if len(resp.GetRootJson()) == 0 {
		return meta.RootLocation("", 0), nil
	}
	var l meta.Location
	if err := json.Unmarshal(resp.GetRootJson(), &l); err != nil {
		return meta.Location{}, status.Errorf(codes.Internal, "client: the root location %q: %v", resp.GetRootJson(), err)
	}
	return l, nil
}

// metadataFilter keeps the cells ParseLocation needs: loc:server,
// loc:epoch, state:id and state:start, newest version only. The log
// family (32 events of each kind) can be large.
var metadataFilter = &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_Chain_{Chain: &bigtablepb.RowFilter_Chain{Filters: []*bigtablepb.RowFilter{
	{Filter: &bigtablepb.RowFilter_FamilyNameRegexFilter{FamilyNameRegexFilter: meta.FamilyLoc + "|" + meta.FamilyState}},
	{Filter: &bigtablepb.RowFilter_ColumnQualifierRegexFilter{ColumnQualifierRegexFilter: []byte(
		meta.QualServer + "|" + meta.QualEpoch + "|" + meta.QualID + "|" + meta.QualStart)}},
	{Filter: &bigtablepb.RowFilter_CellsPerColumnLimitFilter{CellsPerColumnLimitFilter: 1}},
}}}}

func (s *metadataSource) ScanMetadata(ctx context.Context, tab meta.Location, from []byte, limit int) ([]meta.Location, error) {
	cc, err := s.dial(meta.ServerAddr(tab.Server))
	if err != nil {
		return nil, err
	}
	rr := &bigtablepb.RowRange{StartKey: &bigtablepb.RowRange_StartKeyClosed{StartKeyClosed: from}}
	if !tab.Range().EndsAfter(from) {
		return nil, nil // from is past the tablet
	}
	if !tab.Range().Unbounded() {
		rr.EndKey = &bigtablepb.RowRange_EndKeyOpen{EndKeyOpen: tab.End}
	}
	req := &bigtablepb.ReadRowsRequest{TableName: meta.MetadataTableName, Rows: &bigtablepb.RowSet{RowRanges: []*bigtablepb.RowRange{rr}},
		Filter: metadataFilter, RowsLimit: int64(limit)}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := bigtablepb.NewBigtableClient(cc).ReadRows(ctx, req)
	if err != nil {
		return nil, metadataReadError(tab, err)
	}
	var m chunkMerger
	var out []meta.Location
	for {
		resp, err := st.Recv()
		if errors.Is(err, io.EOF) {
			if err := m.end(); err != nil {
				return nil, err
			}
			s.saw(out...)
			return out, nil
		}
		if err != nil {
			return nil, metadataReadError(tab, err)
		}
		rows, err := m.add(resp.GetChunks())
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			l, err := meta.ParseLocation(r)
			if err != nil {
				return nil, status.Errorf(codes.Internal, "client: METADATA tablet %s on %s: %v", tab.TabletID, tab.Server, err)
			}
			out = append(out, l)
		}
	}
}

// metadataReadError maps the answers that mean "look this METADATA tablet
// up again" to tabletdesc.ErrNotServing, keeping the status in the chain.
func metadataReadError(tab meta.Location, err error) error {
	_, ns := tabletpb.NotServingDetail(err)
	switch c := status.Code(err); {
	case ns, c == codes.Unavailable, c == codes.NotFound:
		return fmt.Errorf("client: METADATA tablet %s on %s: %w (%w)", tab.TabletID, tab.Server, tabletdesc.ErrNotServing, err)
	}
	return err
}

// Retries of a location lookup that found the tablet unassigned, no tablet,
// or kept meeting "not serving" servers: a tablet being moved or split is
// unassigned for a moment, and a dead server's tablets are reassigned once
// the master has taken its lock.
const (
	locateBackoffFirst = 20 * time.Millisecond
	locateBackoffMax   = time.Second
	// locateMaxRetries bounds the retries when the context has no
	// deadline (about 5 s of backoff); with one, the deadline bounds them.
	locateMaxRetries = 10
)

// locateError is a lookup that failed after its retries: it carries a gRPC
// code (NOT_FOUND for ErrNoTablet, UNAVAILABLE otherwise) and wraps the
// Locate error, so that both status.Code and errors.Is work on it. The
// data operations do not retry it again.
type locateError struct {
	code codes.Code
	err  error
}

func (e *locateError) Error() string              { return e.err.Error() }
func (e *locateError) Unwrap() error              { return e.err }
func (e *locateError) GRPCStatus() *status.Status { return status.New(e.code, e.err.Error()) }

// transientLocate reports whether a Locate error is retried with backoff.
func transientLocate(err error) bool {
	return errors.Is(err, ErrUnassigned) || errors.Is(err, ErrNoTablet) || errors.Is(err, tabletdesc.ErrNotServing)
}

// locateRetry is cache.Locate, retried with backoff (locateBackoffFirst
// doubling to locateBackoffMax) while the error is transient and the
// context allows. A transient error that outlives the retries comes back
// as a *locateError.
func locateRetry(ctx context.Context, cache *LocationCache, src MetadataSource, table meta.TableID, row []byte) (meta.Location, error) {
	backoff := locateBackoffFirst
	for retries := 0; ; retries++ {
		l, err := cache.Locate(ctx, src, table, row)
		if err == nil {
			return l, nil
		}
		if !transientLocate(err) {
			return meta.Location{}, err
		}
		final := func() error {
			code := codes.Unavailable
			if errors.Is(err, ErrNoTablet) {
				code = codes.NotFound
			}
			return &locateError{code: code, err: err}
		}
		dl, ok := ctx.Deadline()
		if !ok && retries >= locateMaxRetries || ok && time.Until(dl) < backoff {
			return meta.Location{}, final()
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return meta.Location{}, final()
		case <-t.C:
		}
		backoff = min(2*backoff, locateBackoffMax)
	}
}

// LocateRange returns the locations of the tablets of table covering
// [start, end) (empty end: to the end of the table), in row order and
// without gaps: from the cache when it covers the range, else by walking
// cache.Locate from start, each next lookup at the previous tablet's end.
// Lookups that find a tablet unassigned (ErrUnassigned), no tablet
// (ErrNoTablet) or only servers answering "not serving" are retried with
// backoff from 20 ms doubling to 1 s, until the context's deadline (about
// 5 s of backoff without one); the error then matches the cause
// (errors.Is) and carries a gRPC code: NOT_FOUND for ErrNoTablet,
// UNAVAILABLE otherwise. Other errors of src are returned as they are.
//
// Locations read at different times may overlap when the tablets changed
// during the walk (a merge); each one holds the row it was looked up for.
func LocateRange(ctx context.Context, cache *LocationCache, src MetadataSource, table meta.TableID, start, end []byte) ([]meta.Location, error) {
	if locs, ok := cache.TabletsInRange(table, start, end); ok {
		return locs, nil
	}
	var out []meta.Location
	row := start
	for restarts := 0; ; {
		l, err := locateRetry(ctx, cache, src, table, row)
		if err != nil {
			return nil, err
		}
		if len(out) > 0 && bytes.Compare(l.Start, row) < 0 {
			// The tablet holding row starts before it: the layout changed
			// since the lookups before (a merge, a split being undone), and
			// out's last tablets overlap l. Walk the range again over the
			// new layout rather than answer tablets a reader would read
			// twice, out of order.
			if restarts++; restarts > maxLocateRangeRestarts {
				return nil, status.Errorf(codes.Unavailable, "client: the tablets of %s changed during %d lookups of [%q, %q)", table, restarts, start, end)
			}
			out, row = out[:0], start
			continue
		}
		out = append(out, l)
		if tabletdesc.CompareEnds(l.End, end) >= 0 {
			return out, nil
		}
		row = l.End
	}
}

// maxLocateRangeRestarts bounds how often LocateRange walks a range again
// because its tablets changed under the walk.
const maxLocateRangeRestarts = 8

// metaLocator is the cluster's locator: tablet locations from METADATA
// through the client's LocationCache.
type metaLocator struct {
	cache *LocationCache
	src   MetadataSource
	conn  func(server string) (grpc.ClientConnInterface, error) // the client's pool
}

func (l *metaLocator) tablets(ctx context.Context, table string, start, end []byte) ([]tabletLoc, error) {
	id, err := meta.ParseTableName(table)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "client: table %q: %v", table, err)
	}
	locs, err := LocateRange(ctx, l.cache, l.src, id, start, end)
	if err != nil {
		return nil, err
	}
	out := make([]tabletLoc, len(locs))
	for i, loc := range locs {
		cc, err := l.conn(loc.Server)
		if err != nil {
			return nil, err
		}
		out[i] = tabletLoc{start: loc.Start, end: loc.End, server: loc.Server, conn: cc, loc: loc}
		if len(out[i].end) == 0 {
			out[i].end = nil
		}
	}
	return out, nil
}
