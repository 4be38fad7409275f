// Command scheduler is notiflow's scheduler: it hosts the targets API, and
// while it holds the scan lock it claims due targets into the outbox and
// relays the outbox to Kafka. Configuration: README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
	_ "time/tzdata" // IANA zones even in images without /usr/share/zoneinfo

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"golang.org/x/sync/errgroup"

	libconfig "github.com/notiflow/notiflow/lib/config"
	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/obs"
	"github.com/notiflow/notiflow/services/scheduler/internal/adapters"
	"github.com/notiflow/notiflow/services/scheduler/internal/app"
	benchadapters "github.com/notiflow/notiflow/services/scheduler/internal/benchrun/adapters"
	benchapp "github.com/notiflow/notiflow/services/scheduler/internal/benchrun/app"
	benchports "github.com/notiflow/notiflow/services/scheduler/internal/benchrun/ports"
	"github.com/notiflow/notiflow/services/scheduler/internal/config"
	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
	"github.com/notiflow/notiflow/services/scheduler/internal/ports"
)

func main() {
	printConfig := flag.Bool("print-config", false, libconfig.PrintConfigUsage)
	flag.Parse()
	var cfg config.Config
	var printTo io.Writer // stdout with -print-config
	if *printConfig {
		printTo = os.Stdout
	}
	if err := libconfig.LoadChecked(&cfg, printTo); err != nil {
		fmt.Fprintf(os.Stderr, "scheduler: invalid configuration:\n%v\n", err)
		os.Exit(2)
	}
	if *printConfig {
		return
	}
	log, err := obs.NewLogger(os.Stdout, "scheduler", cfg.LogLevel)
	if err != nil {
		fmt.Fprintf(os.Stderr, "scheduler: NOTIFLOW_LOG_LEVEL: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err = run(ctx, cfg, log)
	stop()
	if err != nil {
		log.Error("scheduler failed", "err", err)
		os.Exit(1)
	}
	log.Info("scheduler stopped")
}

// run builds the dependencies and serves until ctx ends or a component
// fails. Shutdown order once ctx ends:
//
//  1. readiness goes false (/readyz answers 503);
//  2. the scheduler stops ticking, finishes its current claim batch,
//     flushes the relay and releases the scan lock (app.Scheduler.Run);
//     meanwhile the benchmark service stops taking runs and marks the runs
//     it watches failed (benchapp.Service.Run); the webhook secrets sync
//     to Redis stops (app.WebhookSecrets.Run);
//  3. the HTTP server stops, letting in-flight API requests finish;
//  4. the Kafka writer, Redis and MySQL are closed (deferred).
func run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	log.Info("scheduler starting", "config", cfg)
	reg := obs.NewRegistry()
	health := obs.NewHealth(log)
	metrics := app.NewMetrics(reg)

	store, err := adapters.OpenMySQL(ctx, cfg.MySQLDSN, cfg.MySQLMaxConns)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: cfg.RedisAddr, Password: cfg.RedisPassword})
	defer rdb.Close()
	if err := kafkax.EnsureTopics(ctx, cfg.Kafka.Brokers, cfg.Kafka.Topics()...); err != nil {
		return fmt.Errorf("ensure kafka topics: %w", err)
	}
	writer := kafkax.NewWriter(cfg.Kafka.Brokers, kafkax.WriterOptions{
		WriteTimeout: cfg.Kafka.WriteTimeout, MaxMessageBytes: cfg.Kafka.MaxMessageBytes,
	})
	defer writer.Close()

	health.AddCheck("mysql", store.Ping)
	health.AddCheck("redis", func(ctx context.Context) error { return rdb.Ping(ctx).Err() })
	kc := &kafka.Client{Addr: kafka.TCP(cfg.Kafka.Brokers...), Timeout: 2 * time.Second}
	health.AddCheck("kafka", func(ctx context.Context) error {
		_, err := kc.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{cfg.Kafka.TopicDue}})
		return err
	})

	targets := app.NewTargets(store, domain.Limits{
		MaxParamsBytes: cfg.MaxParamsBytes, MaxRecordBytes: cfg.Kafka.MaxMessageBytes, RecordBytes: adapters.DueRecordBytes,
	}, cfg.BulkMax, nil)
	secrets := app.NewWebhookSecrets(store, adapters.NewSecretCache(rdb, cfg.RedisPrefix), app.WebhookSecretsOptions{
		Grace: cfg.WebhookSecretGrace, SyncEvery: cfg.WebhookSecretSync,
	}, log)
	targets.UseSecrets(secrets)
	mux := obs.Mux(health, reg)
	ports.NewAPI(targets, ports.Options{
		Token: cfg.APIToken, MaxParamsBytes: cfg.MaxParamsBytes, MaxBulkBodyBytes: cfg.MaxBulkBodyBytes, Parked: store,
		Secrets: secrets,
	}, log).Register(mux)
	if cfg.APIToken == "" {
		log.Warn("API authentication is disabled (NOTIFLOW_INSECURE_NO_AUTH): development only")
	}
	bench := benchapp.NewService(benchapp.Deps{
		Runs:      benchadapters.NewStore(store.DB()),
		Targets:   app.NewRuns(targets, store),
		Persisted: benchadapters.NewPersisted(store.DB()),
		Sends:     benchadapters.NewSimSends(rdb, cfg.RedisPrefix),
		Lag: benchadapters.NewLag(kc,
			benchadapters.GroupTopic{Group: cfg.DispatcherGroup, Topic: cfg.Kafka.TopicDue},
			benchadapters.GroupTopic{Group: cfg.SinkGroup, Topic: cfg.Kafka.TopicDispatched}),
	},
		benchapp.Options{
			Lead: cfg.BenchLead, Stall: cfg.BenchStall, Sample: cfg.BenchSample, MaxNotifications: cfg.BenchMaxNotifications,
		}, log)
	benchports.NewHandler(bench, cfg.APIToken, log).Register(mux)

	leader := app.NewLeader(app.RedisMutexes(rdb, cfg.LockKey, cfg.LockTTL), cfg.LockTTL, log, metrics)
	relay := app.NewRelay(store, adapters.NewDuePublisher(writer, cfg.Kafka.TopicDue), cfg.RelayBatch, time.Now, metrics, log)
	sched := app.NewScheduler(leader, store, relay, store, app.SchedulerOptions{
		Tick:            cfg.Tick,
		ClaimBatch:      cfg.ClaimBatch,
		Policy:          domain.MissedPolicy{Collapse: cfg.CollapseMissed, MaxCatchUp: cfg.MaxCatchUp},
		Retention:       cfg.OutboxRetention,
		ShutdownTimeout: cfg.ShutdownTimeout,
	}, log, metrics)

	httpCtx, stopHTTP := context.WithCancel(context.Background())
	defer stopHTTP()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { // 1.
		<-gctx.Done()
		health.SetDraining()
		return nil
	})
	g.Go(func() error {
		defer stopHTTP() // 3. after the scheduler drained
		if !cfg.ScanEnabled {
			log.Info("scanning disabled (NOTIFLOW_SCAN_ENABLED=false): serving the API only")
			<-gctx.Done()
			return nil
		}
		return sched.Run(gctx) // 2.
	})
	g.Go(func() error { return bench.Run(gctx) })   // 2.
	g.Go(func() error { return secrets.Run(gctx) }) // 2.
	g.Go(func() error { return obs.Serve(httpCtx, cfg.HTTPAddr, mux, cfg.HTTP, cfg.ShutdownTimeout) })
	log.Info("scheduler started", "http_addr", cfg.HTTPAddr)
	return g.Wait()
}
