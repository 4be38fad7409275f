package service

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/services/sink/internal/app"
	"github.com/notiflow/notiflow/services/sink/internal/domain"
	"github.com/notiflow/notiflow/services/sink/internal/ports"
)

// countingStore writes nothing; it counts rows and can pretend each
// statement takes a while.
type countingStore struct {
	rows  atomic.Int64
	first atomic.Int64
	last  atomic.Int64
	delay time.Duration
}

func (s *countingStore) Upsert(_ context.Context, rows []domain.Row) error {
	if s.delay > 0 {
		time.Sleep(s.delay)
	}
	now := time.Now().UnixNano()
	s.first.CompareAndSwap(0, now)
	s.rows.Add(int64(len(rows)))
	s.last.Store(now)
	return nil
}

// BenchmarkConsumeOnly is the batched pipeline (Kafka fetch, decode,
// batching, collapse, flush concurrency, commits) with a store that writes
// nothing: the consumption ceiling the database sits behind.
// NOTIFLOW_BENCH_STORE_DELAY_MS makes each statement sleep, to see whether
// flushes overlap.
func BenchmarkConsumeOnly(b *testing.B) {
	n := envInt("NOTIFLOW_BENCH_RESULTS", 100_000)
	e := newEnv(b, 12)
	msgs := make([]kafka.Message, n)
	for i := range n {
		msgs[i] = e.message(b, e.result(i))
	}
	e.produceMsgs(b, msgs...)
	msgs = nil
	for b.Loop() {
		store := &countingStore{delay: time.Duration(envInt("NOTIFLOW_BENCH_STORE_DELAY_MS", 0)) * time.Millisecond}
		cfg := e.config(b)
		cfg.FlushConcurrency = envInt("NOTIFLOW_BENCH_FLUSH_CONCURRENCY", cfg.FlushConcurrency)
		w := kafkax.NewWriter(e.brokers, kafkax.WriterOptions{})
		sink := app.NewSink(store, kafkax.NewDeadLetter(w, e.dlqTopic, "sink"), app.NewMetrics(nil), time.Minute)
		c, err := ports.NewConsumer(ports.ConsumerConfig{
			Brokers: e.brokers, Topic: e.topic, Group: cfg.Group,
			BatchSize: cfg.BatchSize, BatchIdle: cfg.BatchIdle, BatchMaxAge: cfg.BatchMaxAge,
			FlushConcurrency: cfg.FlushConcurrency, MaxInFlight: cfg.MaxInFlight, DrainTimeout: 5 * time.Second,
			BackoffMax: time.Second, DLQ: kafkax.NewDeadLetter(w, e.dlqTopic, "sink"),
			Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry(),
		}, sink)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		for store.rows.Load() < int64(n) {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		<-done
		_ = w.Close()
		secs := time.Duration(store.last.Load() - store.first.Load()).Seconds()
		b.ReportMetric(float64(n)/secs, "rows/s")
	}
}
