package client

import (
	"bytes"
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/cluster/clusterpb"
	"github.com/tabuladb/tabula/storage/meta"
	"github.com/tabuladb/tabula/storage/tabletdesc"
	"github.com/tabuladb/tabula/storage/tabletserver/scriptpb"
)

// tabletLoc is one tablet, [start, end) (nil end: the end of the table),
// and the server that holds it.
type tabletLoc struct {
	start, end []byte
	server     string                   // the server's identity (its address; in a cluster its name, see meta.ServerAddr)
	conn       grpc.ClientConnInterface // a connection to it
	loc        meta.Location            // the cached location it came from (zero from serverLocator)
}

// locator finds the tablets of a row range: serverLocator on `tabula dev`,
// metaLocator (METADATA, three levels, through the LocationCache) in a
// cluster; autoLocator picks one.
type locator interface {
	// tablets returns the tablets that overlap [start, end) (nil end:
	// unbounded), in key order, covering the range without gaps.
	tablets(ctx context.Context, table string, start, end []byte) ([]tabletLoc, error)
}

// autoLocator picks the locator the first time one is needed, by asking
// the server behind the client's connection for the root tablet
// (clusterpb.Locator.GetRoot): a cluster's tablet servers answer, and the
// client reads locations from METADATA (metaLocator); `tabula dev` answers
// UNIMPLEMENTED, and its one server lists its tablets (serverLocator). The
// choice is kept; a failed GetRoot (UNAVAILABLE, say) is not a choice and
// is asked again next time. Options.Metadata chooses the metaLocator
// without asking.
type autoLocator struct {
	c *Client

	mu     sync.Mutex
	chosen locator
	meta   *metaLocator // chosen, in a cluster
}

// choose returns the locator, and the metaLocator when it is that.
func (a *autoLocator) choose(ctx context.Context) (locator, *metaLocator, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.chosen != nil {
		return a.chosen, a.meta, nil
	}
	p := a.c.plane
	if src := a.c.opts.Metadata; src != nil {
		a.meta = &metaLocator{cache: p.cache, src: src, conn: p.conn}
		a.chosen = a.meta
		return a.chosen, a.meta, nil
	}
	_, err := clusterpb.NewLocatorClient(a.c.cc).GetRoot(ctx, &clusterpb.GetRootRequest{})
	switch status.Code(err) {
	case codes.OK:
		a.meta = &metaLocator{cache: p.cache, src: NewMetadataSource(a.c.cc, p.connAddr), conn: p.conn}
		a.chosen = a.meta
	case codes.Unimplemented:
		a.chosen = &serverLocator{cc: a.c.cc}
	default:
		return nil, nil, fmt.Errorf("client: asking %s for the root tablet: %w", a.c.cc.Target(), err)
	}
	return a.chosen, a.meta, nil
}

func (a *autoLocator) tablets(ctx context.Context, table string, start, end []byte) ([]tabletLoc, error) {
	l, _, err := a.choose(ctx)
	if err != nil {
		return nil, err
	}
	return l.tablets(ctx, table, start, end)
}

// serverLocator is the single-server locator: the server behind the
// client's address holds every tablet, and says which they are.
type serverLocator struct {
	cc grpc.ClientConnInterface
}

func (l *serverLocator) tablets(ctx context.Context, table string, start, end []byte) ([]tabletLoc, error) {
	resp, err := scriptpb.NewScriptsClient(l.cc).ListTablets(ctx, &scriptpb.ListTabletsRequest{TableName: table})
	if err != nil {
		return nil, err
	}
	var out []tabletLoc
	for _, t := range resp.GetTablets() {
		tl := tabletLoc{start: t.GetStartKey(), end: t.GetEndKey(), server: "", conn: l.cc}
		if len(tl.end) == 0 {
			tl.end = nil
		}
		if (tabletdesc.KeyRange{Start: tl.start, End: tl.end}).Overlaps(tabletdesc.KeyRange{Start: start, End: end}) {
			out = append(out, tl)
		}
	}
	return out, nil
}

// span is a contiguous row range held by one server: one Run.
type span struct {
	start, end []byte
	tablets    int
	server     string
	conn       grpc.ClientConnInterface
	locs       []meta.Location // the cached locations of its tablets (a cluster's)
}

// spans clips the tablets to [start, end) and merges neighbours on the
// same server, so a server holding a stretch of the range gets one Run
// for it. It fails with UNAVAILABLE when the tablets leave a gap (a
// location that changed while it was read: the caller may retry).
func spans(tabs []tabletLoc, start, end []byte) ([]span, error) {
	var out []span
	want := tabletdesc.KeyRange{Start: start, End: end}
	next := start // the first key not covered yet
	for _, t := range tabs {
		if bytes.Compare(t.start, next) > 0 {
			return nil, status.Errorf(codes.Unavailable, "no tablet holds the rows from %q to %q", next, t.start)
		}
		// The tablet's part of the range not covered yet.
		part := tabletdesc.KeyRange{Start: next, End: t.end}.Intersect(want)
		s := span{start: part.Start, end: part.End, tablets: 1, server: t.server, conn: t.conn}
		if t.loc.Server != "" {
			s.locs = []meta.Location{t.loc}
		}
		if n := len(out); n > 0 && out[n-1].server == s.server {
			out[n-1].end = s.end
			out[n-1].tablets++
			out[n-1].locs = append(out[n-1].locs, s.locs...)
		} else {
			out = append(out, s)
		}
		if s.end == nil {
			return out, nil
		}
		next = s.end
		if !want.EndsAfter(next) {
			return out, nil
		}
	}
	if !want.EndsAfter(next) {
		return out, nil
	}
	return nil, status.Errorf(codes.Unavailable, "%s", fmt.Sprintf("no tablet holds the rows from %q on", next))
}

// LocateStats returns the counts of the client's location lookups that
// read METADATA (LocationCache.Stats); zero against `tabula dev`, which has
// no METADATA.
func (c *Client) LocateStats() LocateStats { return c.plane.cache.Stats() }
