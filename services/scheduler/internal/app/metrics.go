package app

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics are the scheduler's Prometheus instruments. Build them once per
// process with NewMetrics and share them.
type Metrics struct {
	Claimed          prometheus.Counter
	OutboxInserted   prometheus.Counter
	ClaimErrors      prometheus.Counter
	CatchUpTruncated prometheus.Counter
	BrokenTargets    prometheus.Counter
	ScanDuration     prometheus.Histogram
	Published        prometheus.Counter
	PublishBatch     prometheus.Histogram
	DueToPublish     prometheus.Histogram
	RelayErrors      prometheus.Counter
	HiddenRows       prometheus.Counter
	Parked           prometheus.Counter
	OutboxBacklog    prometheus.Gauge
	Purged           prometheus.Counter
	Settled          prometheus.Counter
	LockHeld         prometheus.Gauge
	LockLost         prometheus.Counter
}

// NewMetrics creates the instruments and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	counter := func(name, help string) prometheus.Counter {
		return f.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	gauge := func(name, help string) prometheus.Gauge {
		return f.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	// histogram has n buckets, doubling from first (seconds).
	histogram := func(name, help string, first float64, n int) prometheus.Histogram {
		return f.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: prometheus.ExponentialBuckets(first, 2, n)})
	}
	return &Metrics{
		Claimed:          counter("notiflow_scheduler_claimed_targets_total", "Due targets claimed (and advanced)."),
		OutboxInserted:   counter("notiflow_scheduler_outbox_inserted_total", "Outbox rows written (one per due occurrence)."),
		ClaimErrors:      counter("notiflow_scheduler_claim_errors_total", "Claim transactions that failed and rolled back."),
		CatchUpTruncated: counter("notiflow_scheduler_catchup_truncated_total", "Targets whose missed slots exceeded NOTIFLOW_MAX_CATCHUP."),
		BrokenTargets:    counter("notiflow_scheduler_broken_targets_total", "Targets paused because their stored schedule no longer parses."),
		ScanDuration:     histogram("notiflow_scheduler_scan_duration_seconds", "Duration of one scan (claim batches until nothing is due).", 0.001, 16),
		Published:        counter("notiflow_scheduler_published_total", "Notifications published to the due topic and acknowledged."),
		PublishBatch:     histogram("notiflow_scheduler_publish_batch_seconds", "Duration of publishing one relay batch, until acknowledged.", 0.0005, 16),
		DueToPublish:     histogram("notiflow_scheduler_due_to_publish_seconds", "Delay from an occurrence's due time to its acknowledgement by Kafka.", 0.001, 18),
		RelayErrors:      counter("notiflow_scheduler_relay_errors_total", "Relay passes that failed (rows stay unpublished and are retried)."),
		HiddenRows:       counter("notiflow_scheduler_relay_hidden_rows_total", "Outbox rows a relay pass found missing from its read below rows it published (the cursor stayed below them)."),
		Parked:           counter("notiflow_scheduler_outbox_parked_total", "Outbox rows parked because they can never be published (too large, not encodable); see GET /admin/outbox/parked."),
		OutboxBacklog:    gauge("notiflow_scheduler_outbox_backlog", "Outbox rows not yet published (sampled by the lock holder)."),
		Purged:           counter("notiflow_scheduler_outbox_purged_total", "Published outbox rows deleted after the retention."),
		Settled:          counter("notiflow_scheduler_one_shots_settled_total", "Claimed one-shots whose stored status was set to done after the claim."),
		LockHeld:         gauge("notiflow_scheduler_lock_held", "1 while this replica holds the scan lock."),
		LockLost:         counter("notiflow_scheduler_lock_lost_total", "Times the scan lock could not be extended and scanning stopped."),
	}
}
