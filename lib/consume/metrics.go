package consume

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the consumer's Prometheus collectors, labelled by group (and
// topic, partition where it applies).
type metrics struct {
	consumed, processed, retried, deadLettered, skipped *prometheus.CounterVec
	handlerSeconds                                      *prometheus.HistogramVec
	batchSize                                           *prometheus.HistogramVec
	inFlight                                            *prometheus.GaugeVec
	committedOffset, lag, uncommitted                   *prometheus.GaugeVec
	rebalances                                          *prometheus.CounterVec
	takeovers                                           *prometheus.CounterVec
	panics                                              *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "notiflow", Subsystem: "consumer", Name: name, Help: help}, labels))
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "notiflow", Subsystem: "consumer", Name: name, Help: help}, labels))
	}
	return &metrics{
		consumed:     counter("records_consumed_total", "Records fetched from Kafka.", "group", "topic"),
		processed:    counter("records_processed_total", "Records handled successfully.", "group", "topic"),
		retried:      counter("records_retried_total", "Handler attempts that failed and were retried.", "group", "topic"),
		deadLettered: counter("records_dead_lettered_total", "Records sent to the dead-letter topic.", "group", "topic"),
		skipped:      counter("records_skipped_total", "Tombstones (nil values) skipped.", "group", "topic"),
		handlerSeconds: register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "notiflow", Subsystem: "consumer", Name: "handler_seconds",
			Help:    "Duration of one handler call (a record, or a batch for batch handlers).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"group"})),
		batchSize: register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "notiflow", Subsystem: "consumer", Name: "batch_size",
			Help:    "Records per batch handed to a batch handler.",
			Buckets: []float64{1, 5, 10, 25, 50, 100, 200, 500, 1000},
		}, []string{"group"})),
		inFlight:        gauge("in_flight", "Records fetched and not yet done.", "group"),
		committedOffset: gauge("committed_offset", "Last committed offset per partition.", "group", "topic", "partition"),
		lag:             gauge("lag", "High watermark minus committed offset per partition.", "group", "topic", "partition"),
		uncommitted: gauge("uncommitted", "Records per partition from the first unfinished one to the fetch position, finished or not: what a crash would redeliver. "+
			"Fetching of the partition pauses while it is at MaxUncommittedPerPartition.", "group", "topic", "partition"),
		rebalances: counter("rebalances_total", "Generations joined.", "group"),
		takeovers: counter("fetch_takeovers_total",
			"Records run on the fetching goroutine (short handlers) that took longer than 5 ms, so that another goroutine took over the partition's fetching.", "group"),
		panics: counter("handler_panics_total", "Handler calls (a record, or a batch) that panicked; their records are dead lettered.", "group"),
	}
}

// register registers c, or returns the identical collector already
// registered (several consumers of one group in one process share them).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err) // a metric name clash is a programming error
	}
	return c
}
