// Command sink is notiflow's sink: it consumes dispatch results from
// notify.dispatched.v1 and persists them in MySQL's notifications table in
// batches, committing offsets only once the rows are durable.
// Configuration and design: README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"golang.org/x/sync/errgroup"

	libconfig "github.com/notiflow/notiflow/lib/config"
	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/obs"
	"github.com/notiflow/notiflow/services/sink/internal/adapters"
	"github.com/notiflow/notiflow/services/sink/internal/app"
	"github.com/notiflow/notiflow/services/sink/internal/config"
	"github.com/notiflow/notiflow/services/sink/internal/ports"
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
		fmt.Fprintf(os.Stderr, "sink: invalid configuration:\n%v\n", err)
		os.Exit(2)
	}
	if *printConfig {
		return
	}
	log, err := obs.NewLogger(os.Stdout, "sink", cfg.LogLevel)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sink: NOTIFLOW_LOG_LEVEL: %v\n", err)
		os.Exit(2)
	}
	adapters.SetDriverLogger(log) // process-wide, so set once here
	tuneGC()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err = run(ctx, cfg, log, obs.NewRegistry())
	stop()
	if err != nil {
		log.Error("sink failed", "err", err)
		os.Exit(1)
	}
	log.Info("sink stopped")
}

// defaultGCPercent is the sink's garbage-collection target when GOGC is
// not set. The sink allocates for every record (Kafka message, decoded
// result, statement arguments) but keeps little alive (~15 MiB), so Go's
// default of 100 collects every few MiB; 400 measured 20-25% less sink CPU
// (3.0 -> 2.3 s per 100k rows) and 13% more rows/s on 2 cores, for about
// 30 MiB more RSS (README.md, Benchmarks).
const defaultGCPercent = 400

// tuneGC applies defaultGCPercent unless GOGC is set (which then wins).
func tuneGC() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}
}

// run builds the dependencies and consumes until ctx ends or a component
// fails. Shutdown order once ctx ends:
//
//  1. readiness goes false (/readyz answers 503);
//  2. the consumer stops fetching, hands the partial batch to a flusher,
//     waits up to the drain timeout for the flushes in progress (a flush
//     that keeps failing is abandoned then, its records uncommitted),
//     commits what is durable and leaves the group (ports.NewConsumer);
//  3. the HTTP server stops;
//  4. the dead-letter writer and MySQL are closed (deferred).
func run(ctx context.Context, cfg config.Config, log *slog.Logger, reg *prometheus.Registry) error {
	log.Info("sink starting", "config", cfg)
	health := obs.NewHealth(log)
	metrics := app.NewMetrics(reg)

	store, err := adapters.Open(ctx, cfg.MySQLDSN, adapters.Options{MaxConns: cfg.FlushConcurrency + 1})
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	if err := kafkax.EnsureTopics(ctx, cfg.Kafka.Brokers, sinkTopics(cfg.Kafka)...); err != nil {
		return fmt.Errorf("ensure kafka topics: %w", err)
	}
	writer := kafkax.NewWriter(cfg.Kafka.Brokers, kafkax.WriterOptions{
		WriteTimeout: cfg.Kafka.WriteTimeout, MaxMessageBytes: cfg.Kafka.MaxMessageBytes,
	})
	defer writer.Close()
	dlq := kafkax.NewDeadLetter(writer, cfg.Kafka.TopicDLQ, "sink")

	sink := app.NewSink(store, dlq, metrics, cfg.FlushTimeout)
	consumer, err := ports.NewConsumer(ports.ConsumerConfig{
		Brokers:          cfg.Kafka.Brokers,
		Topic:            cfg.Kafka.TopicDispatched,
		Group:            cfg.Group,
		Naive:            cfg.Naive,
		BatchSize:        cfg.BatchSize,
		BatchIdle:        cfg.BatchIdle,
		BatchMaxAge:      cfg.BatchMaxAge,
		FlushConcurrency: cfg.FlushConcurrency,
		MaxInFlight:      cfg.MaxInFlight,
		DrainTimeout:     cfg.DrainTimeout(),
		BackoffMax:       cfg.RetryBackoffMax,
		DLQ:              dlq,
		Logger:           log,
		Registerer:       reg,
	}, sink)
	if err != nil {
		return fmt.Errorf("build consumer: %w", err)
	}

	health.AddCheck("mysql", func(ctx context.Context) error {
		err := store.Ping(ctx)
		metrics.SetDBUp(err == nil)
		return err
	})
	health.AddCheck("writes", consumer.Check)
	kc := &kafka.Client{Addr: kafka.TCP(cfg.Kafka.Brokers...), Timeout: 2 * time.Second}
	health.AddCheck("kafka", func(ctx context.Context) error {
		_, err := kc.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{cfg.Kafka.TopicDispatched}})
		return err
	})
	mux := obs.Mux(health, reg)

	httpCtx, stopHTTP := context.WithCancel(context.Background())
	defer stopHTTP()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { // 1.
		<-gctx.Done()
		health.SetDraining()
		return nil
	})
	g.Go(func() error {
		defer stopHTTP()          // 3. after the consumer drained
		return consumer.Run(gctx) // 2.
	})
	g.Go(func() error { return obs.Serve(httpCtx, cfg.HTTPAddr, mux, cfg.HTTP, cfg.ShutdownTimeout) })
	log.Info("sink started", "http_addr", cfg.HTTPAddr, "naive", cfg.Naive)
	return g.Wait()
}

// sinkTopics are the topics the sink reads and writes (results and dead
// letters), each once.
func sinkTopics(kc kafkax.Config) []kafka.TopicConfig {
	var out []kafka.TopicConfig
	seen := map[string]bool{}
	for _, t := range kc.Topics() {
		if (t.Topic == kc.TopicDispatched || t.Topic == kc.TopicDLQ) && !seen[t.Topic] {
			seen[t.Topic] = true
			out = append(out, t)
		}
	}
	return out
}
