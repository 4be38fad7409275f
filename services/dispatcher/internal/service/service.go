// Package service wires the dispatcher together (config, Redis, Kafka,
// providers, consumer, HTTP) and runs it with a bounded shutdown. main and
// the end-to-end tests and benchmarks build it the same way.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"golang.org/x/sync/errgroup"

	"github.com/notiflow/notiflow/lib/consume"
	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/obs"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
	"github.com/notiflow/notiflow/services/dispatcher/internal/adapters"
	"github.com/notiflow/notiflow/services/dispatcher/internal/app"
	"github.com/notiflow/notiflow/services/dispatcher/internal/config"
	"github.com/notiflow/notiflow/services/dispatcher/internal/domain"
	"github.com/notiflow/notiflow/services/dispatcher/internal/ports"
)

// resultBatchSize bounds the records of one produce request per partition.
const resultBatchSize = 64

// Service is one dispatcher process's components. Build it with New, run it
// once with Run.
type Service struct {
	cfg     config.Config
	log     *slog.Logger
	reg     *prometheus.Registry
	health  *obs.Health
	rdb     *redis.Client
	batcher *adapters.Batcher
	results *adapters.Results
	writer  *kafka.Writer
	// dispatcher renews the claims of long sends (its Run).
	dispatcher *app.Dispatcher
	webhook    *adapters.Webhook
	consumer   *consume.Consumer[*notiflowv1.NotificationDue]
	mux        *http.ServeMux
}

// LoadTemplates parses the built-in templates and, when file is set, the
// JSON object of templates in it (which win on the same id). Errors name
// NOTIFLOW_TEMPLATES_FILE.
func LoadTemplates(file string) (*domain.Templates, error) {
	var extra map[string]string
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("NOTIFLOW_TEMPLATES_FILE: %w", err)
		}
		if extra, err = domain.ParseTemplateJSON(data); err != nil {
			return nil, fmt.Errorf("NOTIFLOW_TEMPLATES_FILE %s: %w", file, err)
		}
	}
	t, err := domain.NewTemplates(extra)
	if err != nil {
		return nil, fmt.Errorf("NOTIFLOW_TEMPLATES_FILE %s: %w", file, err)
	}
	return t, nil
}

// New builds the dispatcher from a validated cfg. It creates the topics
// (waiting for Kafka while ctx lasts) but does not need Redis to be up:
// records wait for Redis instead. reg may be nil (a fresh registry).
func New(ctx context.Context, cfg config.Config, log *slog.Logger, reg *prometheus.Registry) (*Service, error) {
	if reg == nil {
		reg = obs.NewRegistry()
	}
	templates, err := LoadTemplates(cfg.TemplatesFile)
	if err != nil {
		return nil, err
	}
	if err := ensureTopics(ctx, cfg, log); err != nil {
		return nil, err
	}
	m := app.NewMetrics(reg)
	s := &Service{cfg: cfg, log: log, reg: reg, health: obs.NewHealth(log)}

	s.rdb = redis.NewClient(&redis.Options{
		Addr: cfg.RedisAddr, Password: cfg.RedisPassword,
		// No client-side retries: a retried pipeline could apply a
		// command twice; the dispatcher retries itself, knowing what is
		// safe to repeat.
		MaxRetries:            -1,
		DialTimeout:           time.Second,
		ReadTimeout:           cfg.RedisTimeout,
		WriteTimeout:          cfg.RedisTimeout,
		ContextTimeoutEnabled: true,
		PoolSize:              cfg.RedisPipelines + 8,
		PipelinePoolSize:      cfg.RedisPipelines,
	})
	s.batcher = adapters.NewBatcher(s.rdb, cfg.RedisBatch, cfg.RedisPipelines, cfg.RedisTimeout, m.RedisBatch)
	store := adapters.NewStore(s.rdb, s.batcher, adapters.StoreOptions{
		Prefix: cfg.RedisPrefix, InflightTTL: cfg.InflightTTL, DoneTTL: cfg.DedupTTL,
		RateLimit: cfg.RateLimit, RateWindow: cfg.RateWindow, RatePolicy: cfg.RatePolicy(),
	})
	secrets, err := adapters.NewSecrets(s.rdb, adapters.SecretsOptions{
		Prefix: cfg.RedisPrefix, Global: cfg.WebhookSigningSecrets, CacheTTL: cfg.WebhookSecretCache,
	})
	if err != nil {
		_ = s.rdb.Close()
		return nil, fmt.Errorf("NOTIFLOW_WEBHOOK_SIGNING_SECRET: %w", err)
	}
	if len(cfg.WebhookSigningSecrets) == 0 {
		log.Warn("NOTIFLOW_WEBHOOK_SIGNING_SECRET is not set: webhooks of targets without their own secret go unsigned")
	}
	s.webhook, err = adapters.NewWebhook(adapters.WebhookOptions{
		AttemptTimeout: cfg.WebhookTimeout, MaxElapsed: cfg.WebhookMaxElapsed,
		BackoffMin: cfg.WebhookBackoffMin, BackoffMax: cfg.WebhookBackoffMax,
		BreakerFailures: cfg.BreakerFailures, BreakerCooldown: cfg.BreakerCooldown,
		Allow: cfg.WebhookAllow, MaxConnsPerHost: cfg.WebhookMaxConnsPerHost,
		Latency: m.WebhookLatency, CircuitState: m.CircuitState, Keys: secrets,
	})
	if err != nil {
		_ = s.rdb.Close()
		return nil, fmt.Errorf("NOTIFLOW_WEBHOOK_ALLOW: %w", err)
	}
	s.writer = kafkax.NewWriter(cfg.Kafka.Brokers, kafkax.WriterOptions{
		WriteTimeout: cfg.Kafka.WriteTimeout, MaxMessageBytes: cfg.Kafka.MaxMessageBytes,
		// kafka-go allocates room for BatchSize messages for every batch;
		// results arrive one by one and a partition's batch rarely holds
		// more than a few dozen, so the default of 1000 made the writer the
		// largest allocator (and a fuller batch is simply followed by the
		// next one).
		BatchSize: resultBatchSize,
	})
	dlq := kafkax.NewDeadLetter(s.writer, cfg.Kafka.TopicDLQ, "dispatcher")
	senders := map[notiflowv1.Channel]app.Sender{
		notiflowv1.Channel_CHANNEL_WEBHOOK: s.webhook,
		notiflowv1.Channel_CHANNEL_INBOX:   adapters.Inbox{},
		notiflowv1.Channel_CHANNEL_SIM: &adapters.Sim{
			Latency: cfg.SimLatency, FailureRate: cfg.SimFailureRate, Recorder: store,
			BackoffMin: 50 * time.Millisecond, BackoffMax: 2 * time.Second,
		},
	}
	s.results = adapters.NewResults(s.writer, cfg.Kafka.TopicDispatched, cfg.Kafka.MaxMessageBytes)
	s.dispatcher = app.New(store, store, templates, senders, s.results, dlq, m, log, app.Options{InflightTTL: cfg.InflightTTL})
	s.consumer, err = ports.NewConsumer(cfg, consume.HandlerFunc[*notiflowv1.NotificationDue](s.dispatcher.Handle), dlq, log, reg)
	if err != nil {
		s.close()
		return nil, err
	}

	s.health.AddCheck("redis", store.Ping)
	kc := &kafka.Client{Addr: kafka.TCP(cfg.Kafka.Brokers...), Timeout: 2 * time.Second}
	s.health.AddCheck("kafka", func(ctx context.Context) error {
		_, err := kc.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{cfg.Kafka.TopicDue}})
		if err != nil {
			return fmt.Errorf("kafka metadata: %w", err)
		}
		return nil
	})
	s.mux = obs.Mux(s.health, reg)
	if cfg.Pprof {
		s.mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		s.mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		s.mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return s, nil
}

// ensureTopics creates the topics, retrying while Kafka is unreachable
// (so that a dispatcher started before Kafka waits instead of exiting).
func ensureTopics(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	for try := 1; ; try++ {
		err := kafkax.EnsureTopics(ctx, cfg.Kafka.Brokers, cfg.Kafka.Topics()...)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("ensure kafka topics: %w", err)
		}
		log.Warn("ensure kafka topics; retrying", "err", err, "attempt", try)
		select {
		case <-ctx.Done():
			return fmt.Errorf("ensure kafka topics: %w", ctx.Err())
		case <-time.After(consume.Backoff(try, time.Second, 15*time.Second)):
		}
	}
}

// Ready reports whether the dispatcher can work (Redis and Kafka answer,
// not draining).
func (s *Service) Ready(ctx context.Context) error { return s.health.Ready(ctx) }

// Handler serves /healthz, /readyz and /metrics (and /debug/pprof/ when
// enabled).
func (s *Service) Handler() http.Handler { return s.mux }

// Run consumes until ctx ends, serving HTTP on ln (nil: listen on
// NOTIFLOW_HTTP_ADDR). Shutdown order once ctx ends:
//
//  1. readiness goes false (/readyz answers 503);
//  2. the consumer stops fetching, lets running records finish within
//     NOTIFLOW_DRAIN_TIMEOUT (then abandons them uncommitted), commits and
//     leaves the group;
//  3. the Redis batcher, the result publisher and the claim keeper stop
//     (no record needs them any more), the HTTP server shuts down;
//  4. the Kafka writer and the Redis client are closed.
//
// Run returns an error when a component fails, or when the shutdown takes
// longer than NOTIFLOW_SHUTDOWN_TIMEOUT.
func (s *Service) Run(ctx context.Context, ln net.Listener) error {
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", s.cfg.HTTPAddr); err != nil {
			s.close()
			return fmt.Errorf("listen on %s (NOTIFLOW_HTTP_ADDR): %w", s.cfg.HTTPAddr, err)
		}
	}
	// The helpers records need (Redis batcher, result publisher, claim
	// keeper) outlive the consumer: they stop once it has drained.
	batchCtx, stopBatcher := context.WithCancel(context.Background())
	defer stopBatcher()
	httpCtx, stopHTTP := context.WithCancel(context.Background())
	defer stopHTTP()

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { // 1.
		<-gctx.Done()
		s.health.SetDraining()
		return nil
	})
	g.Go(func() error {
		defer stopHTTP()            // 3.
		defer stopBatcher()         // 3.
		return s.consumer.Run(gctx) // 2.
	})
	g.Go(func() error { return s.batcher.Run(batchCtx) })
	g.Go(func() error { return s.results.Run(batchCtx) })
	g.Go(func() error { return s.dispatcher.Run(batchCtx) })
	g.Go(func() error { return s.webhook.Run(batchCtx) })
	g.Go(func() error { return obs.ServeListener(httpCtx, ln, s.mux, s.cfg.HTTP, 2*time.Second) })
	s.log.Info("dispatcher started", "http_addr", ln.Addr().String())

	done := make(chan error, 1)
	go func() { done <- g.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-gctx.Done():
		select {
		case err = <-done:
		case <-time.After(s.cfg.ShutdownTimeout):
			err = fmt.Errorf("shutdown did not finish within NOTIFLOW_SHUTDOWN_TIMEOUT (%s)", s.cfg.ShutdownTimeout)
		}
	}
	s.close() // 4.
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

func (s *Service) close() {
	if s.writer != nil {
		_ = s.writer.Close()
	}
	if s.webhook != nil {
		s.webhook.Close()
	}
	if s.rdb != nil {
		_ = s.rdb.Close()
	}
}
