// Package service wires the scheduler together (config, MySQL, Redis,
// Kafka, the targets API, the benchmark admin API, the scan loop, HTTP)
// and runs it with a bounded shutdown. main and the tests build it the same
// way.
package service

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/httpapi"
	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/netguard"
	"github.com/notiflow/notiflow/lib/obs"
	"github.com/notiflow/notiflow/lib/svc"
	"github.com/notiflow/notiflow/services/scheduler/internal/adapters"
	"github.com/notiflow/notiflow/services/scheduler/internal/app"
	benchadapters "github.com/notiflow/notiflow/services/scheduler/internal/benchrun/adapters"
	benchapp "github.com/notiflow/notiflow/services/scheduler/internal/benchrun/app"
	benchports "github.com/notiflow/notiflow/services/scheduler/internal/benchrun/ports"
	"github.com/notiflow/notiflow/services/scheduler/internal/config"
	"github.com/notiflow/notiflow/services/scheduler/internal/dlq"
	dlqadapters "github.com/notiflow/notiflow/services/scheduler/internal/dlq/adapters"
	dlqports "github.com/notiflow/notiflow/services/scheduler/internal/dlq/ports"
	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
	"github.com/notiflow/notiflow/services/scheduler/internal/ports"
)

// Service is one scheduler process's components. Build it with New, run it
// once with Run.
type Service struct {
	cfg    config.Config
	log    *slog.Logger
	health *obs.Health
	store  *adapters.MySQLStore
	rdb    *redis.Client
	writer *kafka.Writer
	lag    *benchadapters.Lag
	sched  *app.Scheduler
	bench  *benchapp.Service
	// secrets keeps the Redis copy of the webhook signing secrets in step.
	secrets *app.WebhookSecrets
	// templates checks and stores managed templates and keeps their Redis
	// copy (its Run is a helper).
	templates *app.Templates
	// fences keeps the Redis copy of the target fences in step.
	fences *app.Fences
	routes []string // the patterns registered on mux
	mux    *http.ServeMux
}

// GCPercent is the garbage-collection target main applies unless GOGC is
// set (svc.SetGCPercent): NOTIFLOW_GC_PERCENT.
func GCPercent(cfg config.Config) int { return cfg.GCPercent }

// Run builds the scheduler from a validated cfg and runs it until ctx
// ends: what main does.
func Run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	s, err := New(ctx, cfg, log, nil)
	if err != nil {
		return err
	}
	return s.Run(ctx, nil)
}

// topics are the topics the scheduler reads or writes: it publishes due
// notifications, the benchmark reads the sink group's lag on results, and
// the dead-letter admin routes read the DLQ and redrive to the other two.
func topics(cfg config.Config) []string {
	return []string{cfg.Kafka.TopicDue, cfg.Kafka.TopicDispatched, cfg.Kafka.TopicDLQ}
}

// New builds the scheduler from a validated cfg: it opens MySQL and
// migrates the schema, and makes sure the topics exist
// (kafkax.PrepareTopics: waiting for Kafka while ctx lasts, failing at once
// on a topic Kafka refuses). reg may be nil (a fresh registry).
func New(ctx context.Context, cfg config.Config, log *slog.Logger, reg *prometheus.Registry) (*Service, error) {
	if reg == nil {
		reg = obs.NewRegistry()
	}
	metrics := app.NewMetrics(reg)
	s := &Service{cfg: cfg, log: log, health: obs.NewHealth(log)}
	var err error
	if s.store, err = adapters.OpenMySQL(ctx, cfg.MySQLDSN, cfg.MySQLMaxConns); err != nil {
		return nil, err
	}
	if err := s.store.Migrate(ctx); err != nil {
		s.close()
		return nil, err
	}
	s.rdb = redis.NewClient(&redis.Options{Addr: cfg.RedisAddr, Password: cfg.RedisPassword})
	if err := kafkax.PrepareTopics(ctx, cfg.Kafka.Brokers, log, cfg.Kafka.TopicsNamed(topics(cfg)...)...); err != nil {
		s.close()
		return nil, err
	}
	s.writer = kafkax.NewWriter(cfg.Kafka.Brokers, kafkax.WriterOptions{
		WriteTimeout: cfg.Kafka.WriteTimeout, MaxMessageBytes: cfg.Kafka.MaxMessageBytes,
	})

	s.health.AddCheck("mysql", s.store.Ping)
	s.health.AddCheck("redis", func(ctx context.Context) error { return s.rdb.Ping(ctx).Err() })
	s.health.AddCheck("kafka", kafkax.HealthCheck(cfg.Kafka.Brokers, topics(cfg)...))
	s.mux = obs.Mux(s.health, reg)

	targets := app.NewTargets(s.store, domain.Limits{
		MaxParamsBytes: cfg.MaxParamsBytes, MaxRecordBytes: cfg.Kafka.MaxMessageBytes, RecordBytes: adapters.DueRecordBytes,
	}, cfg.BulkMax, nil)
	s.secrets = app.NewWebhookSecrets(s.store, adapters.NewSecretCache(s.rdb, cfg.RedisPrefix), app.WebhookSecretsOptions{
		Grace: cfg.WebhookSecretGrace, SyncEvery: cfg.WebhookSecretSync,
	}, log)
	targets.UseSecrets(s.secrets)
	s.fences = app.NewFences(s.store, adapters.NewFenceCache(s.rdb, cfg.RedisPrefix), app.FencesOptions{
		Wait: cfg.FenceWait, SyncEvery: cfg.FenceSync,
	}, log)
	targets.UseFences(s.fences)
	hooks, err := netguard.NewGuard(cfg.WebhookAllow)
	if err != nil {
		s.close()
		return nil, fmt.Errorf("NOTIFLOW_WEBHOOK_ALLOW: %w", err)
	}
	targets.UseWebhookGuard(hooks, nil)
	static, err := loadStaticTemplates(cfg.TemplatesFile)
	if err != nil {
		s.close()
		return nil, err
	}
	s.templates, err = app.NewTemplates(s.store, adapters.NewTemplateCopy(s.rdb, cfg.RedisPrefix),
		app.TemplatesOptions{Static: static, SyncEvery: cfg.TemplateSync}, log)
	if err != nil {
		s.close()
		return nil, fmt.Errorf("NOTIFLOW_TEMPLATES_FILE %s: %w", cfg.TemplatesFile, err)
	}
	targets.UseTemplates(s.templates)
	routes := &routeRecorder{ServeMux: s.mux, patterns: slices.Clone(obs.MuxPatterns)}
	ports.NewAPI(targets, ports.Options{
		Token: cfg.APIToken, MaxParamsBytes: cfg.MaxParamsBytes, MaxBulkBodyBytes: cfg.MaxBulkBodyBytes, Parked: s.store,
		Secrets: s.secrets, Templates: s.templates,
	}, log).Register(routes)
	if cfg.APIToken == "" {
		log.Warn("API authentication is disabled (NOTIFLOW_INSECURE_NO_AUTH): development only")
	}
	if cfg.Pprof {
		obs.MountPprof(s.mux, httpapi.NewGuard(cfg.APIToken, nil, log, "pprof request failed").Wrap)
	}
	s.bench = s.newBench(targets)
	benchports.NewHandler(s.bench, cfg.APIToken, log).
		WithSinkAPI(benchports.SinkAPI{BaseURL: cfg.SinkAPIURL, Token: cfg.APIToken}).Register(routes)

	dlqports.NewHandler(dlq.NewService(cfg.Kafka.TopicDLQ,
		dlqadapters.NewTopicLog(cfg.Kafka.Brokers, cfg.Kafka.TopicDLQ),
		dlqadapters.NewMarks(s.rdb, cfg.RedisPrefix, cfg.Kafka.TopicDLQ, cfg.DLQRedriveMarkTTL),
		s.writer, dlq.Options{MaxRedrives: cfg.DLQMaxRedrives, RedriveMax: cfg.DLQRedriveMax}, log),
		cfg.APIToken, log).Register(routes)
	s.routes = routes.patterns

	leader := app.NewLeader(app.RedisMutexes(s.rdb, cfg.LockKey, cfg.LockTTL), cfg.LockTTL, log, metrics)
	relay := app.NewRelay(s.store, adapters.NewDuePublisher(s.writer, cfg.Kafka.TopicDue), cfg.RelayBatch, time.Now, metrics, log)
	s.sched = app.NewScheduler(leader, s.store, relay, s.store, app.SchedulerOptions{
		Tick:            cfg.Tick,
		ClaimBatch:      cfg.ClaimBatch,
		Policy:          domain.MissedPolicy{Collapse: cfg.CollapseMissed, MaxCatchUp: cfg.MaxCatchUp},
		Retention:       cfg.OutboxRetention,
		ShutdownTimeout: cfg.ShutdownTimeout,
	}, log, metrics)
	return s, nil
}

// loadStaticTemplates returns the built-in templates and, when file is
// set, those of the templates file (NOTIFLOW_TEMPLATES_FILE, the one the
// dispatchers are given), which win on the same id.
func loadStaticTemplates(file string) (map[string]string, error) {
	var data []byte
	if file != "" {
		var err error
		if data, err = os.ReadFile(file); err != nil {
			return nil, fmt.Errorf("NOTIFLOW_TEMPLATES_FILE: %w", err)
		}
	}
	m, err := app.StaticTemplates(data)
	if err != nil {
		return nil, fmt.Errorf("NOTIFLOW_TEMPLATES_FILE %s: %w", file, err)
	}
	return m, nil
}

// newBench builds the benchmark service behind the admin endpoints: it
// creates a run's targets through targets (the API's bulk-create path).
func (s *Service) newBench(targets *app.Targets) *benchapp.Service {
	cfg := s.cfg
	kc := &kafka.Client{Addr: kafka.TCP(cfg.Kafka.Brokers...), Timeout: 2 * time.Second}
	s.lag = benchadapters.NewLag(kc,
		benchadapters.GroupTopic{Group: cfg.DispatcherGroup, Topic: cfg.Kafka.TopicDue},
		benchadapters.GroupTopic{Group: cfg.SinkGroup, Topic: cfg.Kafka.TopicDispatched})
	return benchapp.NewService(benchapp.Deps{
		Runs:      benchadapters.NewStore(s.store.DB()),
		Targets:   app.NewRuns(targets, s.store),
		Persisted: benchadapters.NewPersisted(s.store.DB()),
		Sends:     benchadapters.NewSimSends(s.rdb, cfg.RedisPrefix),
		Lag:       s.lag,
	},
		benchapp.Options{
			Lead: cfg.BenchLead, Stall: cfg.BenchStall, Sample: cfg.BenchSample, MaxNotifications: cfg.BenchMaxNotifications,
		}, s.log)
}

// routeRecorder is the service's mux, recording the patterns registered
// on it (Routes).
type routeRecorder struct {
	*http.ServeMux
	patterns []string
}

func (r *routeRecorder) Handle(pattern string, h http.Handler) {
	r.patterns = append(r.patterns, pattern)
	r.ServeMux.Handle(pattern, h)
}

func (r *routeRecorder) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	r.patterns = append(r.patterns, pattern)
	r.ServeMux.HandleFunc(pattern, h)
}

// Routes returns the patterns ("METHOD /path") Handler serves, in the
// order they were registered; the OpenAPI document describes each.
func (s *Service) Routes() []string { return slices.Clone(s.routes) }

// Ready reports whether the scheduler can work (MySQL, Redis and Kafka
// answer, not draining).
func (s *Service) Ready(ctx context.Context) error { return s.health.Ready(ctx) }

// Handler serves the targets API, the benchmark and dead-letter admin
// APIs, /healthz, /readyz and /metrics.
func (s *Service) Handler() http.Handler { return s.mux }

// Run scans and serves the API until ctx ends, serving HTTP on ln (nil:
// listen on NOTIFLOW_HTTP_ADDR), and shuts down in the order of svc.Runner.
// The scheduler's intake (steps 2-4) is the scan loop, which stops ticking,
// finishes its current claim batch, flushes the relay and releases the scan
// lock (app.Scheduler.Run), and the benchmark service, which stops taking
// runs and marks the runs it watches failed (benchapp.Service.Run). The
// webhook secrets and fences syncs to Redis (app.WebhookSecrets.Run,
// app.Fences.Run) are helpers. The
// HTTP server then stops, letting in-flight API requests finish, and the
// benchmark lag sampler's broker connections, the Kafka writer, Redis
// and MySQL are closed last.
//
// Run returns an error when a component fails, or when the shutdown takes
// longer than NOTIFLOW_SHUTDOWN_TIMEOUT.
func (s *Service) Run(ctx context.Context, ln net.Listener) error {
	scan := s.sched.Run
	if !s.cfg.ScanEnabled {
		scan = func(ctx context.Context) error {
			s.log.Info("scanning disabled (NOTIFLOW_SCAN_ENABLED=false): serving the API only")
			<-ctx.Done()
			return nil
		}
	}
	return svc.Runner{
		Name: "scheduler", Log: s.log, Health: s.health,
		Work:     []func(context.Context) error{scan, s.bench.Run},
		Helpers:  []func(context.Context) error{s.secrets.Run, s.templates.Run, s.fences.Run},
		Close:    s.close,
		Listener: ln, Addr: s.cfg.HTTPAddr, Handler: s.mux, HTTP: s.cfg.HTTP,
		ShutdownTimeout: s.cfg.ShutdownTimeout,
	}.Run(ctx)
}

func (s *Service) close() {
	if s.lag != nil {
		s.lag.Close()
	}
	if s.writer != nil {
		_ = s.writer.Close()
	}
	if s.rdb != nil {
		_ = s.rdb.Close()
	}
	if s.store != nil {
		s.store.Close()
	}
}
