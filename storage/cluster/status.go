package cluster

import (
	"context"
	"net/http"
	"sort"

	"github.com/tabuladb/tabula/storage/cluster/statuspage"
	"github.com/tabuladb/tabula/storage/master/assign"
	"github.com/tabuladb/tabula/storage/meta"
)

// masterStatus fills the master's status page from the assignment loop's last
// observation and the event ring.
func (m *Master) masterStatus(context.Context) (statuspage.MasterStatus, error) {
	active, since := m.loop.Leading()
	st := statuspage.MasterStatus{Cluster: m.cfg.Cluster, Addr: m.addr, Active: active}
	if active {
		st.MasterSince = since
	}
	obs := m.loop.Observed()
	served := make(map[assign.TabletID]bool)
	byID := make(map[assign.TabletID]assign.Tablet, len(obs.Tablets))
	for _, t := range obs.Tablets {
		byID[t.ID] = t
	}
	for _, s := range obs.Live {
		srv := statuspage.Server{ID: string(s.ID), Addr: s.Addr}
		for _, sv := range s.Serving {
			served[sv.ID] = true
			t := statuspage.Tablet{Table: sv.Table, ID: string(sv.ID), Start: []byte(sv.Start), End: []byte(sv.End), Bytes: sv.Bytes, Server: string(s.ID), State: statuspage.StateServing}
			if sv.Splitting {
				t.State = statuspage.StateSplitting
			}
			if mt, ok := byID[sv.ID]; ok && t.Table == "" {
				t.Table, t.Start, t.End = mt.Table, []byte(mt.Start), []byte(mt.End)
			}
			srv.Tablets = append(srv.Tablets, t)
			srv.Bytes += sv.Bytes
		}
		st.Servers = append(st.Servers, srv)
	}
	sort.Slice(st.Servers, func(i, j int) bool { return st.Servers[i].ID < st.Servers[j].ID })
	for _, t := range obs.Tablets {
		if !served[t.ID] {
			st.Unassigned = append(st.Unassigned, statuspage.Tablet{Table: t.Table, ID: string(t.ID), Start: []byte(t.Start), End: []byte(t.End), State: statuspage.StateUnassigned})
		}
	}
	for _, e := range m.events.newest() {
		st.Events = append(st.Events, statuspage.Event{Time: e.Time, Kind: e.Kind, Tablet: e.Tablet, Server: e.Server, Detail: e.Detail})
	}
	return st, nil
}

// serverStatus fills a tablet server's status page from its Host.
func (s *TabletServer) serverStatus(context.Context) (statuspage.ServerStatus, error) {
	st := statuspage.ServerStatus{Cluster: s.cfg.Cluster, ID: s.name, Addr: s.addr, Since: s.start, LeaseValid: s.sess.Valid()}
	bs := s.blocks.Stats()
	st.BlockCacheHits, st.BlockCacheMisses = bs.Hits, bs.Misses
	if s.scans != nil { // disabled by a negative ScanCacheBytes
		ss := s.scans.Stats()
		st.ScanCacheHits, st.ScanCacheMisses = ss.Hits, ss.Misses
	}
	stats := make(map[string]statuspage.TabletStatus)
	for _, id := range s.host.Tables() {
		for _, ti := range s.host.TableTablets(id) {
			ts := statuspage.TabletStatus{MemtableBytes: ti.Stats.MemtableBytes + ti.Stats.FrozenBytes, Compacting: ti.Stats.FrozenBytes > 0}
			for _, g := range ti.Stats.Groups {
				ts.SSTables += g.SSTables
			}
			stats[ti.ID] = ts
		}
	}
	for _, t := range s.host.ServedTablets() {
		ts := stats[t.ID]
		ts.Table, ts.ID, ts.Start, ts.End, ts.Bytes = tableName(t.Table), t.ID, t.Start, t.End, t.Bytes
		switch {
		case t.Loading:
			ts.State = statuspage.StateLoading
		case t.Unloading:
			ts.State = statuspage.StateUnloading
		case t.Splitting:
			ts.State = statuspage.StateSplitting
		default:
			ts.State = statuspage.StateServing
		}
		if ts.Compacting {
			st.Compactions++
		}
		st.MemtableBytes += ts.MemtableBytes
		st.Tablets = append(st.Tablets, ts)
	}
	return st, nil
}

func tableName(id meta.TableID) string {
	if id == meta.MetadataTable {
		return "METADATA"
	}
	return id.String()
}

func (m *Master) statusHandler() http.Handler { return statuspage.MasterHandler(m.masterStatus) }

func (s *TabletServer) statusHandler() http.Handler { return statuspage.ServerHandler(s.serverStatus) }
