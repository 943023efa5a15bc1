package cluster

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tabuladb/tabula/storage/client"
)

// registerLocateMetrics exposes the location lookups that read METADATA
// of one location cache (a tablet server's gateway's, the master's
// client's), labelled cache=who: how many, how many reads they made, and
// how far up the three-level hierarchy each went (client.LocateStats).
func registerLocateMetrics(reg prometheus.Registerer, who string, stats func() client.LocateStats) {
	labels := prometheus.Labels{"cache": who}
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tabula_location_lookups_total", ConstLabels: labels,
			Help: "Tablet location lookups that missed the location cache and read METADATA."},
			func() float64 { return float64(stats().Lookups) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tabula_location_metadata_reads_total", ConstLabels: labels,
			Help: "Reads those lookups made: root locations asked of the lock service plus METADATA tablets read."},
			func() float64 { return float64(stats().Reads) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tabula_location_lookup_max_levels", ConstLabels: labels,
			Help: "The most levels of the location hierarchy (lock service, root tablet, METADATA tablet) one lookup went up."},
			func() float64 { return float64(stats().MaxLevels) }),
	)
	for levels := 1; levels <= 3; levels++ {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tabula_location_lookups_by_levels_total",
			ConstLabels: prometheus.Labels{"cache": who, "levels": strconv.Itoa(levels)},
			Help:        "Lookups by how many levels of the location hierarchy they went up."},
			func() float64 { return float64(stats().ByLevels[levels]) }))
	}
}
