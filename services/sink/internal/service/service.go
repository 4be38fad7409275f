// Package service wires the sink together (config, MySQL, Kafka, consumer,
// HTTP) and runs it with a bounded shutdown. main and the tests and
// benchmarks build it the same way.
package service

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/consume"
	"github.com/notiflow/notiflow/lib/httpapi"
	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/obs"
	"github.com/notiflow/notiflow/lib/svc"
	"github.com/notiflow/notiflow/services/sink/internal/adapters"
	"github.com/notiflow/notiflow/services/sink/internal/app"
	"github.com/notiflow/notiflow/services/sink/internal/config"
	"github.com/notiflow/notiflow/services/sink/internal/domain"
	"github.com/notiflow/notiflow/services/sink/internal/ports"
	"github.com/notiflow/notiflow/services/sink/notifications"
)

// GCPercent is the garbage-collection target main applies unless GOGC is
// set (svc.SetGCPercent): NOTIFLOW_GC_PERCENT.
func GCPercent(cfg config.Config) int { return cfg.GCPercent }

// Service is one sink process's components. Build it with New, run it once
// with Run.
type Service struct {
	cfg      config.Config
	log      *slog.Logger
	health   *obs.Health
	store    *adapters.Store
	writer   *kafka.Writer
	consumer *consume.Consumer[domain.Result]
	mux      *http.ServeMux
}

// Run builds the sink from a validated cfg and runs it until ctx ends: what
// main does. It also routes the MySQL driver's log to log (process-wide).
func Run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	adapters.SetDriverLogger(log)
	s, err := New(ctx, cfg, log, nil)
	if err != nil {
		return err
	}
	return s.Run(ctx, nil)
}

// topics are the topics the sink reads or writes: results and dead letters.
func topics(cfg config.Config) []string {
	return []string{cfg.Kafka.TopicDispatched, cfg.Kafka.TopicDLQ}
}

// New builds the sink from a validated cfg: it opens MySQL and migrates the
// schema, and makes sure the topics exist (kafkax.PrepareTopics: waiting
// for Kafka while ctx lasts, failing at once on a topic Kafka refuses).
// reg may be nil (a fresh registry).
func New(ctx context.Context, cfg config.Config, log *slog.Logger, reg *prometheus.Registry) (*Service, error) {
	if reg == nil {
		reg = obs.NewRegistry()
	}
	metrics := app.NewMetrics(reg)
	s := &Service{cfg: cfg, log: log, health: obs.NewHealth(log)}
	var err error
	s.store, err = adapters.Open(ctx, cfg.MySQLDSN, adapters.Options{MaxConns: cfg.FlushConcurrency + 1, PreparedRows: cfg.BatchSize})
	if err != nil {
		return nil, err
	}
	if err := s.store.Migrate(ctx); err != nil {
		s.close()
		return nil, err
	}
	if err := kafkax.PrepareTopics(ctx, cfg.Kafka.Brokers, log, cfg.Kafka.TopicsNamed(topics(cfg)...)...); err != nil {
		s.close()
		return nil, err
	}
	s.writer = kafkax.NewWriter(cfg.Kafka.Brokers, kafkax.WriterOptions{
		WriteTimeout: cfg.Kafka.WriteTimeout, MaxMessageBytes: cfg.Kafka.MaxMessageBytes,
	})
	dlq := kafkax.NewDeadLetter(s.writer, cfg.Kafka.TopicDLQ, "sink")

	sink := app.NewSink(s.store, dlq, metrics, cfg.FlushTimeout)
	s.consumer, err = ports.NewConsumer(ports.ConsumerConfig{
		Brokers:          cfg.Kafka.Brokers,
		Topic:            cfg.Kafka.TopicDispatched,
		Group:            cfg.Group,
		Naive:            cfg.Naive,
		BatchSize:        cfg.BatchSize,
		BatchIdle:        cfg.BatchIdle,
		BatchMaxAge:      cfg.BatchMaxAge,
		FlushConcurrency: cfg.FlushConcurrency,
		FetchMinBytes:    cfg.FetchMinBytes,
		MaxInFlight:      cfg.MaxInFlight,
		DrainTimeout:     cfg.DrainTimeout(),
		BackoffMax:       cfg.RetryBackoffMax,
		DLQ:              dlq,
		Logger:           log,
		Registerer:       reg,
	}, sink)
	if err != nil {
		s.close()
		return nil, fmt.Errorf("build consumer: %w", err)
	}

	s.health.AddCheck("mysql", func(ctx context.Context) error {
		err := s.store.Ping(ctx)
		metrics.SetDBUp(err == nil)
		return err
	})
	s.health.AddCheck("writes", s.consumer.Check)
	s.health.AddCheck("kafka", kafkax.HealthCheck(cfg.Kafka.Brokers, topics(cfg)...))
	s.mux = obs.Mux(s.health, reg)
	ports.NewReadAPI(notifications.NewReader(s.store.DB()), cfg.APIToken, log).Register(s.mux)
	if cfg.Pprof {
		obs.MountPprof(s.mux, httpapi.NewGuard(cfg.APIToken, nil, log, "pprof request failed").Wrap)
	}
	return s, nil
}

// Ready reports whether the sink can work (MySQL and Kafka answer, writes
// succeed, not draining).
func (s *Service) Ready(ctx context.Context) error { return s.health.Ready(ctx) }

// Handler serves /healthz, /readyz, /metrics and the read API of the
// notifications table (delivery status, in-app inbox; bearer token).
func (s *Service) Handler() http.Handler { return s.mux }

// Run consumes until ctx ends, serving HTTP on ln (nil: listen on
// NOTIFLOW_HTTP_ADDR), and shuts down in the order of svc.Runner. The
// sink's intake (steps 2-4) is the consumer: it stops fetching, hands the
// partial batch to a flusher, waits up to the drain timeout for the flushes
// in progress (a flush that keeps failing is abandoned then, its records
// uncommitted), commits what is durable and leaves the group. The clients
// closed then are the dead-letter writer and MySQL.
//
// Run returns an error when a component fails, or when the shutdown takes
// longer than NOTIFLOW_SHUTDOWN_TIMEOUT.
func (s *Service) Run(ctx context.Context, ln net.Listener) error {
	return svc.Runner{
		Name: "sink", Log: s.log, Health: s.health,
		Work:     []func(context.Context) error{s.consumer.Run},
		Close:    s.close,
		Listener: ln, Addr: s.cfg.HTTPAddr, Handler: s.mux, HTTP: s.cfg.HTTP,
		ShutdownTimeout: s.cfg.ShutdownTimeout,
	}.Run(ctx)
}

func (s *Service) close() {
	if s.writer != nil {
		_ = s.writer.Close()
	}
	if s.store != nil {
		_ = s.store.Close()
	}
}
