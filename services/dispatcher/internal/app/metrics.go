package app

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the dispatcher's Prometheus collectors (the consumer
// runtime registers its own). Adapters get the ones they feed.
type Metrics struct {
	Results        *prometheus.CounterVec // status, channel
	Latency        prometheus.Histogram   // due -> dispatched
	Duplicates     prometheus.Counter
	RateLimited    prometheus.Counter
	Fenced         prometheus.Counter
	InflightWaits  prometheus.Counter
	DepErrors      *prometheus.CounterVec // dependency, op
	RedisBatch     prometheus.Histogram
	WebhookLatency *prometheus.HistogramVec // outcome
	CircuitState   *prometheus.GaugeVec     // endpoint
	// Stages times the steps of one record: claim (dedup + rate limit,
	// including waits for another worker's claim; a rate-limit deferral is
	// timed by RateDeferWait instead), send (provider), remember (done
	// marker or release), publish (result produce until acknowledged).
	Stages *prometheus.HistogramVec // stage
	stage  [4]prometheus.Observer

	// RateDeferred counts records that waited for their recipient's next
	// rate window (policy defer), once per handling; RateDeferWaiting is
	// how many wait now (each holds a worker); RateDeferWait how long each
	// waited, until it was claimed or its handler was cancelled.
	RateDeferred     prometheus.Counter
	RateDeferWaiting prometheus.Gauge
	RateDeferWait    prometheus.Histogram
}

const (
	stageClaim = iota
	stageSend
	stageRemember
	stagePublish
)

// NewMetrics creates the collectors and registers them with reg (nil:
// not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const ns, sub = "notiflow", "dispatcher"
	m := &Metrics{
		Results: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "results_total",
			Help: "Results published, by status and channel."}, []string{"status", "channel"}),
		Latency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "dispatch_latency_seconds",
			Help:    "Time from a notification's due time to its result.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 20)}),
		Duplicates: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "dedup_duplicates_total",
			Help: "Records found already dispatched (not sent again)."}),
		RateLimited: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "rate_limited_total",
			Help: "Records over their recipient's rate limit recorded RATE_LIMITED and not sent (policy drop)."}),
		Fenced: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "fenced_total",
			Help: "Records their target's fence stopped (recorded CANCELLED, not sent, or not sent again)."}),
		RateDeferred: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "rate_deferred_total",
			Help: "Records over their recipient's rate limit that waited for the next window (policy defer)."}),
		RateDeferWaiting: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "rate_deferred_waiting",
			Help: "Records waiting now for their recipient's next rate window (policy defer); each holds a worker."}),
		RateDeferWait: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "rate_defer_wait_seconds",
			Help:    "Time a deferred record waited for its recipient's rate window, until claimed or cancelled (policy defer).",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 16)}),
		InflightWaits: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "inflight_waits_total",
			Help: "Records that found another worker's in-flight claim and waited for it."}),
		DepErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "dependency_errors_total",
			Help: "Failed calls to Redis or Kafka that were waited out and retried."}, []string{"dependency", "op"}),
		RedisBatch: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "redis_batch_commands",
			Help:    "Commands per Redis pipeline sent by the auto-batcher.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}}),
		WebhookLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "webhook_request_seconds",
			Help:    "Duration of one webhook request, by outcome (2xx, 4xx, 5xx, error).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}, []string{"outcome"}),
		CircuitState: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "webhook_circuit_state",
			Help: "Circuit breaker state per webhook endpoint: 0 closed, 1 half-open, 2 open."}, []string{"endpoint"}),
		Stages: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "stage_seconds",
			Help:    "Duration of each step of dispatching one record (claim, send, remember, publish).",
			Buckets: prometheus.ExponentialBuckets(0.00025, 2, 16)}, []string{"stage"}),
	}
	for i, name := range []string{"claim", "send", "remember", "publish"} {
		m.stage[i] = m.Stages.WithLabelValues(name)
	}
	if reg != nil {
		reg.MustRegister(m.Results, m.Latency, m.Duplicates, m.RateLimited, m.InflightWaits, m.DepErrors,
			m.RedisBatch, m.WebhookLatency, m.CircuitState, m.Stages)
		reg.MustRegister(m.RateDeferred, m.RateDeferWaiting, m.RateDeferWait, m.Fenced)
	}
	return m
}
