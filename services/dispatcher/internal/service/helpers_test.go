package service

import (
	"context"
	"github.com/notiflow/notiflow/lib/fence"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	libconfig "github.com/notiflow/notiflow/lib/config"
	"github.com/notiflow/notiflow/lib/testkit"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
	"github.com/notiflow/notiflow/services/dispatcher/internal/config"
	"github.com/notiflow/notiflow/services/dispatcher/internal/dispatchtest"
)

// env is one test's dispatcher setup: its own topics, group and Redis
// prefix, and collectors on the results and DLQ topics.
type env struct {
	cfg     config.Config
	results *dispatchtest.Collector
	dlq     *dispatchtest.Collector
}

const testPartitions = 4

func newEnv(t *testing.T, mutate func(*config.Config)) *env {
	t.Helper()
	brokers := testkit.KafkaBrokers(t)
	rdb, prefix := testkit.Redis(t)
	// No scheduler runs here, so no target was ever changed: the fences'
	// copy is complete and empty.
	if err := fence.MarkSynced(context.Background(), rdb, prefix); err != nil {
		t.Fatal(err)
	}
	var cfg config.Config
	if err := libconfig.FillZero(&cfg); err != nil {
		t.Fatalf("default config: %v", err)
	}
	cfg.Kafka.Brokers = brokers
	cfg.Kafka.Partitions = testPartitions
	cfg.Kafka.TopicDue = testkit.Topic(t, brokers, testPartitions)
	cfg.Kafka.TopicDispatched = testkit.Topic(t, brokers, testPartitions)
	cfg.Kafka.TopicDLQ = testkit.Topic(t, brokers, 1)
	cfg.Group = testkit.Group(t)
	cfg.RedisAddr = testkit.RedisAddr(t)
	cfg.RedisPrefix = prefix
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.CommitInterval = 50 * time.Millisecond
	cfg.DrainTimeout = 5 * time.Second
	cfg.ShutdownTimeout = 15 * time.Second
	cfg.WebhookAllow = []string{"127.0.0.1/32"}
	cfg.WebhookBackoffMin = 20 * time.Millisecond
	cfg.WebhookBackoffMax = 200 * time.Millisecond
	cfg.WebhookMaxElapsed = 20 * time.Second
	cfg.WebhookTimeout = 2 * time.Second
	cfg.BreakerCooldown = 300 * time.Millisecond
	cfg.SimLatency = time.Millisecond
	cfg.Workers = 64
	if mutate != nil {
		mutate(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("test config: %v", err)
	}
	return &env{
		cfg:     cfg,
		results: dispatchtest.Collect(t, brokers, cfg.Kafka.TopicDispatched, testPartitions),
		dlq:     dispatchtest.Collect(t, brokers, cfg.Kafka.TopicDLQ, 1),
	}
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() || os.Getenv("NOTIFLOW_TEST_LOGS") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("test", t.Name())
	}
	return slog.New(slog.DiscardHandler)
}

// start runs a dispatcher for the test; stop (also run at cleanup) cancels
// it and waits for Run to return (testkit.Go fails the test if Run returns
// an error or does not return).
func (e *env) start(t *testing.T) (s *Service, stop func()) {
	t.Helper()
	s, err := New(t.Context(), e.cfg, testLogger(t), nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	run := testkit.Go(t, func(ctx context.Context) error { return s.Run(ctx, ln) })
	return s, func() { _ = run.Stop() }
}

func (e *env) produce(t *testing.T, dues ...*notiflowv1.NotificationDue) {
	t.Helper()
	dispatchtest.Produce(t, e.cfg.Kafka.Brokers, e.cfg.Kafka.TopicDue, dues)
}

// waitResults waits for n results and decodes them.
func (e *env) waitResults(t *testing.T, n int, timeout time.Duration) []*notiflowv1.NotificationDispatched {
	t.Helper()
	return dispatchtest.Results(t, e.results.WaitLen(t, n, timeout))
}

func byID(rs []*notiflowv1.NotificationDispatched) map[string][]*notiflowv1.NotificationDispatched {
	m := map[string][]*notiflowv1.NotificationDispatched{}
	for _, r := range rs {
		m[r.NotificationId] = append(m[r.NotificationId], r)
	}
	return m
}

func header(hs []kafka.Header, key string) string {
	for _, h := range hs {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
