package tabletserver

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/tabuladb/tabula/storage/pacing"
)

// metrics are the server's Prometheus metrics: request counters and
// latencies (kept by the interceptors), data volumes (kept by the
// DataService) and the tablets' gauges (read from the Host on collection).
type metrics struct {
	reg        prometheus.Registerer
	collectors []prometheus.Collector

	requests     *prometheus.CounterVec
	latency      *prometheus.HistogramVec
	bytesRead    prometheus.Counter
	bytesWritten prometheus.Counter
	rowsRead     prometheus.Counter
	splits       prometheus.Counter
	logReleases  prometheus.Counter
	// metaReleases counts METADATA tablets released by
	// HostOptions.MetadataLogRelease.
	metaReleases prometheus.Counter
	// budgetFlushes counts flushes asked for by the memtable budget.
	budgetFlushes prometheus.Counter
	// budgetWaits counts writes held back by the memtable budget.
	budgetWaits prometheus.Counter
	// writesTurnedAway counts the entries of bulk writes that met a
	// tablet as it stopped (a split, an unload) and went again.
	writesTurnedAway prometheus.Counter
	lease            *leaseMetrics
}

func newMetrics(h *Host, reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tabula_requests_total", Help: "gRPC requests by method and status code.",
		}, []string{"method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tabula_request_duration_seconds", Help: "gRPC request latency by method.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 18), // 50 µs to about 6.5 s
		}, []string{"method"}),
		bytesRead: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tabula_read_bytes_total", Help: "Bytes of cell values and keys returned by ReadRows.",
		}),
		bytesWritten: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tabula_written_bytes_total", Help: "Bytes of row mutations applied.",
		}),
		rowsRead: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tabula_rows_read_total", Help: "Rows returned by ReadRows.",
		}),
		splits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tabula_tablet_splits_total", Help: "Tablet splits done by this server.",
		}),
		logReleases: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tabula_commitlog_release_flushes_total", Help: "Tablets flushed (or, if idle, given a new redo point) because their redo point held commit-log segments HostOptions.LogFlushSegments behind the tail.",
		}),
		metaReleases: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tabula_commitlog_metadata_releases_total", Help: "METADATA tablets flushed (or, if idle, given a new redo point) to keep their redo point near the commit log's tail (HostOptions.MetadataLogRelease).",
		}),
		budgetFlushes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tabula_memtable_budget_flushes_total", Help: "Memtables flushed before they were full because the memtables of all tablets together passed HostOptions.MemtableBudget.",
		}),
		budgetWaits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tabula_memtable_budget_write_waits_total", Help: "Writes held back because the memtables of all tablets together held twice HostOptions.MemtableBudget.",
		}),
		writesTurnedAway: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tabula_bulk_write_entries_turned_away_total", Help: "Times an entry of a MutateRows request met a tablet that had stopped serving (a split, an unload) and went again, to the tablet then holding its row.",
		}),
		lease: newLeaseMetrics(h),
	}
	m.collectors = []prometheus.Collector{m.requests, m.latency, m.bytesRead, m.bytesWritten, m.rowsRead, m.splits, m.logReleases, m.metaReleases, m.budgetFlushes, m.budgetWaits, m.writesTurnedAway, &tabletCollector{h: h}, &commitLogCollector{h: h}}
	m.collectors = append(m.collectors, m.lease.collectors()...)
	if reg == nil {
		return m, nil
	}
	for i, c := range m.collectors {
		if err := reg.Register(c); err != nil {
			for _, done := range m.collectors[:i] {
				reg.Unregister(done)
			}
			return nil, err
		}
	}
	return m, nil
}

// unregister removes the metrics from the registry, so a new Host can
// register on it (tests, restarts in one process).
func (m *metrics) unregister() {
	if m.reg == nil {
		return
	}
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
}

// observe records one finished request.
func (m *metrics) observe(fullMethod string, start time.Time, err error) {
	method := fullMethod[strings.LastIndexByte(fullMethod, '/')+1:]
	m.requests.WithLabelValues(method, status.Code(err).String()).Inc()
	m.latency.WithLabelValues(method).Observe(time.Since(start).Seconds())
}

// UnaryInterceptor returns the interceptor that counts and times unary
// requests; install it (and StreamInterceptor) on the grpc.Server that
// serves the DataService and the admin API.
// Every request counts as foreground work for HostOptions.Pacer while it
// runs.
func (h *Host) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		h.opts.Pacer.Begin()
		resp, err := handler(ctx, req)
		h.opts.Pacer.End()
		h.metrics.observe(info.FullMethod, start, err)
		return resp, err
	}
}

// StreamInterceptor returns the interceptor that counts and times
// streaming requests. A server-streaming request counts as foreground
// work for HostOptions.Pacer while it runs; a bidirectional stream, which
// may stay open and idle for as long as its peer lives (the gateway's
// shared point-read streams), counts only at each message it receives.
func (h *Host) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		var err error
		if p := h.opts.Pacer; p != nil && info.IsClientStream {
			err = handler(srv, &pacedStream{ServerStream: ss, pacer: p})
		} else {
			p.Begin()
			err = handler(srv, ss)
			p.End()
		}
		h.metrics.observe(info.FullMethod, start, err)
		return err
	}
}

// pacedStream marks foreground work at every message a client-streaming
// request receives.
type pacedStream struct {
	grpc.ServerStream
	pacer *pacing.Pacer
}

func (s *pacedStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	s.pacer.Touch()
	return err
}

// tabletCollector reports the tablets' gauges, summed per table, at
// collection time: per-tablet series would multiply with every split.
type tabletCollector struct{ h *Host }

var (
	descTablets     = prometheus.NewDesc("tabula_tablets", "Open tablets.", []string{"table"}, nil)
	descMemtable    = prometheus.NewDesc("tabula_memtable_bytes", "Bytes in memtables (active and being flushed).", []string{"table"}, nil)
	descSSTables    = prometheus.NewDesc("tabula_sstables", "SSTables referenced by open tablets (shared files counted per tablet).", []string{"table"}, nil)
	descSSTBytes    = prometheus.NewDesc("tabula_sstable_bytes", "Bytes of SSTables referenced by open tablets.", []string{"table"}, nil)
	descCompactions = prometheus.NewDesc("tabula_compactions_total", "Compactions by the open tablets since they opened.", []string{"table", "kind"}, nil)
	descCache       = prometheus.NewDesc("tabula_cache_requests_total", "Block and scan cache lookups.", []string{"cache", "result"}, nil)
	descCacheBytes  = prometheus.NewDesc("tabula_block_cache_bytes", "Bytes of SSTable blocks in the block cache.", nil, nil)
	descBgBytes     = prometheus.NewDesc("tabula_background_write_bytes_total", "Bytes the tablets' own flushes and merging compactions wrote, by whether the pacer charged them at a finite rate (paced) or not (unpaced: the server idle or the work pressed).", []string{"pacing"}, nil)
	descBgWaited    = prometheus.NewDesc("tabula_background_paced_seconds_total", "Time the tablets' own flushes and merging compactions waited in the pacer while requests were served.", nil, nil)
	descCollected   = prometheus.NewDesc("tabula_flush_collected_entries_total", "Entries of frozen memtables that the open tablets' flushes left out of their SSTables: older writes of a version and versions the GC policies collect.", []string{"table"}, nil)
)

func (c *tabletCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTablets, descMemtable, descSSTables, descSSTBytes, descCompactions, descCache, descCacheBytes, descBgBytes, descBgWaited, descCollected} {
		ch <- d
	}
}

func (c *tabletCollector) Collect(ch chan<- prometheus.Metric) {
	for _, id := range c.h.Tables() {
		// Stats only: TableTablets also measures each tablet's own
		// bytes, which walks the memtables, too slow for every scrape.
		st, err := c.h.table(id)
		if err != nil {
			continue
		}
		tabs := st.list()
		var mem, ssts, sstBytes, flushes, merges, majors, collected float64
		for _, tb := range tabs {
			s := tb.Stats()
			mem += float64(s.MemtableBytes + s.FrozenBytes)
			for _, g := range s.Groups {
				ssts += float64(g.SSTables)
				sstBytes += float64(g.Bytes)
			}
			flushes += float64(s.Flushes)
			merges += float64(s.Merges)
			majors += float64(s.Majors)
			collected += float64(s.FlushCollected)
		}
		name := id.String()
		ch <- prometheus.MustNewConstMetric(descTablets, prometheus.GaugeValue, float64(len(tabs)), name)
		ch <- prometheus.MustNewConstMetric(descMemtable, prometheus.GaugeValue, mem, name)
		ch <- prometheus.MustNewConstMetric(descSSTables, prometheus.GaugeValue, ssts, name)
		ch <- prometheus.MustNewConstMetric(descSSTBytes, prometheus.GaugeValue, sstBytes, name)
		ch <- prometheus.MustNewConstMetric(descCompactions, prometheus.CounterValue, flushes, name, "minor")
		ch <- prometheus.MustNewConstMetric(descCompactions, prometheus.CounterValue, merges, name, "merging")
		ch <- prometheus.MustNewConstMetric(descCompactions, prometheus.CounterValue, majors, name, "major")
		ch <- prometheus.MustNewConstMetric(descCollected, prometheus.CounterValue, collected, name)
	}
	if bc := c.h.opts.Cache; bc != nil {
		s := bc.Stats()
		ch <- prometheus.MustNewConstMetric(descCache, prometheus.CounterValue, float64(s.Hits), "block", "hit")
		ch <- prometheus.MustNewConstMetric(descCache, prometheus.CounterValue, float64(s.Misses), "block", "miss")
		ch <- prometheus.MustNewConstMetric(descCacheBytes, prometheus.GaugeValue, float64(s.Bytes))
	}
	if p := c.h.opts.Pacer; p != nil {
		s := p.Stats()
		ch <- prometheus.MustNewConstMetric(descBgBytes, prometheus.CounterValue, float64(s.PacedBytes), "paced")
		ch <- prometheus.MustNewConstMetric(descBgBytes, prometheus.CounterValue, float64(s.Bytes-s.PacedBytes), "unpaced")
		ch <- prometheus.MustNewConstMetric(descBgWaited, prometheus.CounterValue, s.Waited.Seconds())
	}
	if sc := c.h.opts.ScanCache; sc != nil {
		s := sc.Stats()
		ch <- prometheus.MustNewConstMetric(descCache, prometheus.CounterValue, float64(s.Hits), "scan", "hit")
		ch <- prometheus.MustNewConstMetric(descCache, prometheus.CounterValue, float64(s.Misses), "scan", "miss")
	}
}
