package app

import "github.com/prometheus/client_golang/prometheus"

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
	OutboxBacklog    prometheus.Gauge
	Purged           prometheus.Counter
	Settled          prometheus.Counter
	LockHeld         prometheus.Gauge
	LockLost         prometheus.Counter
}

// NewMetrics creates the instruments and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Claimed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "notiflow_scheduler_claimed_targets_total", Help: "Due targets claimed (and advanced).",
		}),
		OutboxInserted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "notiflow_scheduler_outbox_inserted_total", Help: "Outbox rows written (one per due occurrence).",
		}),
		ClaimErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "notiflow_scheduler_claim_errors_total", Help: "Claim transactions that failed and rolled back.",
		}),
		CatchUpTruncated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "notiflow_scheduler_catchup_truncated_total", Help: "Targets whose missed slots exceeded NOTIFLOW_MAX_CATCHUP.",
		}),
		BrokenTargets: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "notiflow_scheduler_broken_targets_total", Help: "Targets paused because their stored schedule no longer parses.",
		}),
		ScanDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "notiflow_scheduler_scan_duration_seconds", Help: "Duration of one scan (claim batches until nothing is due).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		Published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "notiflow_scheduler_published_total", Help: "Notifications published to the due topic and acknowledged.",
		}),
		PublishBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "notiflow_scheduler_publish_batch_seconds", Help: "Duration of publishing one relay batch, until acknowledged.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		DueToPublish: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "notiflow_scheduler_due_to_publish_seconds", Help: "Delay from an occurrence's due time to its acknowledgement by Kafka.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
		}),
		RelayErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "notiflow_scheduler_relay_errors_total", Help: "Relay passes that failed (rows stay unpublished and are retried).",
		}),
		OutboxBacklog: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "notiflow_scheduler_outbox_backlog", Help: "Outbox rows not yet published (sampled by the lock holder).",
		}),
		Purged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "notiflow_scheduler_outbox_purged_total", Help: "Published outbox rows deleted after the retention.",
		}),
		Settled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "notiflow_scheduler_one_shots_settled_total", Help: "Claimed one-shots whose stored status was set to done after the claim.",
		}),
		LockHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "notiflow_scheduler_lock_held", Help: "1 while this replica holds the scan lock.",
		}),
		LockLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "notiflow_scheduler_lock_lost_total", Help: "Times the scan lock could not be extended and scanning stopped.",
		}),
	}
	reg.MustRegister(m.Claimed, m.OutboxInserted, m.ClaimErrors, m.CatchUpTruncated, m.BrokenTargets, m.ScanDuration,
		m.Published, m.PublishBatch, m.DueToPublish, m.RelayErrors, m.OutboxBacklog, m.Purged, m.Settled, m.LockHeld, m.LockLost)
	return m
}
