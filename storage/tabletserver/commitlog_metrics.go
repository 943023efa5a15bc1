package tabletserver

import "github.com/prometheus/client_golang/prometheus"

// commitLogCollector exports the server's commit-log counters (group
// commit: how many flushes, how full, how long), read from the log on
// collection. A server without a log exports nothing.
type commitLogCollector struct{ h *Host }

var (
	descLogAppends = prometheus.NewDesc("tabula_commitlog_appends_total",
		"Records appended to the commit log.", nil, nil)
	descLogFlushes = prometheus.NewDesc("tabula_commitlog_flushes_total",
		"Completed commit-log flushes (a write and fsync of the local segment, or one object PUT): each is one group commit.", nil, nil)
	descLogFlushedRecords = prometheus.NewDesc("tabula_commitlog_flushed_records_total",
		"Records made durable by completed flushes; divided by flushes, the mean group-commit size.", nil, nil)
	descLogFlushedBytes = prometheus.NewDesc("tabula_commitlog_flushed_bytes_total",
		"Bytes made durable by completed flushes.", nil, nil)
	descLogFlushSeconds = prometheus.NewDesc("tabula_commitlog_flush_seconds_total",
		"Time the completed flushes took, from the start of each write or PUT to its end; divided by flushes, the mean time a write waits for the disk or the store.", nil, nil)
)

func (c *commitLogCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLogAppends, descLogFlushes, descLogFlushedRecords, descLogFlushedBytes, descLogFlushSeconds} {
		ch <- d
	}
}

func (c *commitLogCollector) Collect(ch chan<- prometheus.Metric) {
	if c.h.opts.Log == nil {
		return
	}
	st := c.h.opts.Log.Stats()
	ch <- prometheus.MustNewConstMetric(descLogAppends, prometheus.CounterValue, float64(st.Appends))
	ch <- prometheus.MustNewConstMetric(descLogFlushes, prometheus.CounterValue, float64(st.Flushes))
	ch <- prometheus.MustNewConstMetric(descLogFlushedRecords, prometheus.CounterValue, float64(st.FlushedRecords))
	ch <- prometheus.MustNewConstMetric(descLogFlushedBytes, prometheus.CounterValue, float64(st.FlushedBytes))
	ch <- prometheus.MustNewConstMetric(descLogFlushSeconds, prometheus.CounterValue, st.FlushTime.Seconds())
}
