// Package service wires the dispatcher together (config, Redis, Kafka,
// providers, consumer, HTTP) and runs it with a bounded shutdown. main and
// the end-to-end tests and benchmarks build it the same way.
package service

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/consume"
	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/obs"
	"github.com/notiflow/notiflow/lib/svc"
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

// loadTemplates parses the built-in templates and, when file is set, the
// JSON object of templates in it (which win on the same id). Errors name
// NOTIFLOW_TEMPLATES_FILE.
func loadTemplates(file string) (*domain.Templates, error) {
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

// GCPercent is the garbage-collection target main applies unless GOGC is
// set (svc.SetGCPercent): NOTIFLOW_GC_PERCENT.
func GCPercent(cfg config.Config) int { return cfg.GCPercent }

// Run builds the dispatcher from a validated cfg and runs it until ctx
// ends: what main does.
func Run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	s, err := New(ctx, cfg, log, nil)
	if err != nil {
		return err
	}
	return s.Run(ctx, nil)
}

// topics are the topics the dispatcher reads or writes: due notifications,
// results and dead letters.
func topics(cfg config.Config) []string {
	return []string{cfg.Kafka.TopicDue, cfg.Kafka.TopicDispatched, cfg.Kafka.TopicDLQ}
}

// New builds the dispatcher from a validated cfg. It makes sure the topics
// exist (kafkax.PrepareTopics: waiting for Kafka while ctx lasts, failing
// at once on a topic Kafka refuses) but does not need Redis to be up:
// records wait for Redis instead. reg may be nil (a fresh registry).
func New(ctx context.Context, cfg config.Config, log *slog.Logger, reg *prometheus.Registry) (*Service, error) {
	if reg == nil {
		reg = obs.NewRegistry()
	}
	templates, err := loadTemplates(cfg.TemplatesFile)
	if err != nil {
		return nil, err
	}
	if err := kafkax.PrepareTopics(ctx, cfg.Kafka.Brokers, log, cfg.Kafka.TopicsNamed(topics(cfg)...)...); err != nil {
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
	secrets, err := adapters.NewSecrets(s.batcher, adapters.SecretsOptions{
		Prefix: cfg.RedisPrefix, Global: cfg.WebhookSigningSecrets, CacheTTL: cfg.WebhookSecretCache,
	})
	if err != nil {
		_ = s.rdb.Close()
		return nil, fmt.Errorf("NOTIFLOW_WEBHOOK_SIGNING_SECRET: %w", err)
	}
	// A webhook's claim reads its target's signing record into the
	// secrets' cache in the claim's pipeline, so that its send does not
	// need a round trip of its own for it.
	store := adapters.NewStore(s.rdb, s.batcher, adapters.StoreOptions{
		Prefix: cfg.RedisPrefix, InflightTTL: cfg.InflightTTL, DoneTTL: cfg.DedupTTL,
		RateLimit: cfg.RateLimit, RateWindow: cfg.RateWindow, RatePolicy: cfg.RatePolicy(),
		Signing: secrets,
	})
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
		// more than a few dozen, so the default of 1000 would make the writer the
		// largest allocator (and a fuller batch is simply followed by the
		// next one).
		BatchSize: resultBatchSize,
		// Results arrive one by one from many workers: a batch held open
		// for NOTIFLOW_RESULT_LINGER collects more of them per produce
		// request than kafkax's 2 ms default.
		BatchTimeout: cfg.ResultLinger,
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
	renderer := adapters.NewTemplates(templates, s.rdb, cfg.RedisPrefix, cfg.TemplateCache)
	s.dispatcher = app.New(store, store, renderer, senders, s.results, dlq, m, log, app.Options{InflightTTL: cfg.InflightTTL})
	s.consumer, err = ports.NewConsumer(cfg, consume.HandlerFunc[*notiflowv1.NotificationDue](s.dispatcher.Handle), dlq, log, reg)
	if err != nil {
		s.close()
		return nil, err
	}

	s.health.AddCheck("redis", store.Ping)
	s.health.AddCheck("kafka", kafkax.HealthCheck(cfg.Kafka.Brokers, topics(cfg)...))
	s.mux = obs.Mux(s.health, reg)
	if cfg.Pprof {
		obs.MountPprof(s.mux, nil) // the dispatcher's port serves no API
	}
	return s, nil
}

// Ready reports whether the dispatcher can work (Redis and Kafka answer,
// not draining).
func (s *Service) Ready(ctx context.Context) error { return s.health.Ready(ctx) }

// Handler serves /healthz, /readyz and /metrics (and /debug/pprof/ when
// enabled).
func (s *Service) Handler() http.Handler { return s.mux }

// Run consumes until ctx ends, serving HTTP on ln (nil: listen on
// NOTIFLOW_HTTP_ADDR), and shuts down in the order of svc.Runner. The
// dispatcher's intake (steps 2-4) is the consumer: it stops fetching, lets
// running records finish within NOTIFLOW_DRAIN_TIMEOUT (then abandons them
// uncommitted), commits and leaves the group. The helpers records need
// until then are the Redis batcher, the result publisher, the claim keeper
// and the webhook sender; the clients closed then are the Kafka writer,
// the webhook transport and Redis.
//
// Run returns an error when a component fails, or when the shutdown takes
// longer than NOTIFLOW_SHUTDOWN_TIMEOUT.
func (s *Service) Run(ctx context.Context, ln net.Listener) error {
	return svc.Runner{
		Name: "dispatcher", Log: s.log, Health: s.health,
		Work:     []func(context.Context) error{s.consumer.Run},
		Helpers:  []func(context.Context) error{s.batcher.Run, s.results.Run, s.dispatcher.Run, s.webhook.Run},
		Close:    s.close,
		Listener: ln, Addr: s.cfg.HTTPAddr, Handler: s.mux, HTTP: s.cfg.HTTP,
		ShutdownTimeout: s.cfg.ShutdownTimeout,
	}.Run(ctx)
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
