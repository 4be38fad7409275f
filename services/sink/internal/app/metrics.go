package app

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the sink's own collectors (the consumer runtime exports
// fetch, lag, commit and batch metrics under notiflow_consumer_*).
type Metrics struct {
	rowsWritten  prometheus.Counter
	results      prometheus.Counter
	batchRows    prometheus.Histogram
	flushSeconds prometheus.Histogram
	flushErrors  *prometheus.CounterVec
	poisonRows   prometheus.Counter
	dbUp         prometheus.Gauge
}

// NewMetrics registers the sink's collectors with reg (nil: registered
// nowhere, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		rowsWritten: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "notiflow", Subsystem: "sink", Name: "rows_written_total",
			Help: "Notification rows inserted or updated by successful statements.",
		}),
		results: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "notiflow", Subsystem: "sink", Name: "results_total",
			Help: "Dispatch results persisted (or dead lettered as poison).",
		}),
		batchRows: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "notiflow", Subsystem: "sink", Name: "flush_rows",
			Help:    "Rows per flush after collapsing repeated notification ids.",
			Buckets: []float64{1, 5, 10, 25, 50, 100, 200, 500, 1000},
		}),
		flushSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "notiflow", Subsystem: "sink", Name: "flush_seconds",
			Help:    "Duration of a successful flush (the INSERT, plus splitting when a row was rejected).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		flushErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "notiflow", Subsystem: "sink", Name: "flush_errors_total",
			Help: "Failed statements: kind=transient (database down, connection lost, timeout; retried) or rejected (data refused; the batch is split).",
		}, []string{"kind"}),
		poisonRows: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "notiflow", Subsystem: "sink", Name: "poison_rows_total",
			Help: "Rows the database refused, sent to the dead-letter topic.",
		}),
		dbUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "notiflow", Subsystem: "sink", Name: "db_up",
			Help: "1 when the last statement or ping succeeded, 0 while the database fails.",
		}),
	}
	m.dbUp.Set(1)
	if reg != nil {
		reg.MustRegister(m.rowsWritten, m.results, m.batchRows, m.flushSeconds, m.flushErrors, m.poisonRows, m.dbUp)
	}
	return m
}

// SetDBUp records the outcome of a database check.
func (m *Metrics) SetDBUp(up bool) {
	if up {
		m.dbUp.Set(1)
	} else {
		m.dbUp.Set(0)
	}
}
