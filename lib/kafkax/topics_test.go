package kafkax_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/lib/testkit"
)

// TestPrepareTopicsCreatesAndChecks: missing topics are created with a
// leader for every partition, after which the health check passes; the
// check names a topic that does not exist.
func TestPrepareTopicsCreatesAndChecks(t *testing.T) {
	t.Parallel()
	brokers := testkit.KafkaBrokers(t)
	existing := testkit.Topic(t, brokers, 2)
	created := testkit.ID("prepare")
	t.Cleanup(func() { deleteTopic(t, brokers, created) })
	cfg := kafkax.Config{Partitions: 3, ReplicationFactor: 1}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := kafkax.PrepareTopics(ctx, brokers, slog.New(slog.DiscardHandler), cfg.TopicsNamed(existing, created, existing)...); err != nil {
		t.Fatalf("PrepareTopics: %v", err)
	}
	if err := kafkax.HealthCheck(brokers, existing, created)(ctx); err != nil {
		t.Fatalf("health check after PrepareTopics: %v", err)
	}
	missing := testkit.ID("missing")
	err := kafkax.HealthCheck(brokers, existing, missing)(ctx)
	var te *kafkax.TopicError
	if !errors.As(err, &te) || te.Topic != missing {
		t.Fatalf("health check with a missing topic: %v, want a *TopicError naming %s", err, missing)
	}
}

// TestPrepareTopicsFailsFastOnARefusedTopic: Kafka refuses a topic with
// more replicas than brokers; PrepareTopics names it at once, no retry.
func TestPrepareTopicsFailsFastOnARefusedTopic(t *testing.T) {
	t.Parallel()
	brokers := testkit.KafkaBrokers(t)
	refused := testkit.ID("refused")
	cfg := kafkax.Config{Partitions: 1, ReplicationFactor: 99}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err := kafkax.PrepareTopics(ctx, brokers, slog.New(slog.DiscardHandler), cfg.TopicsNamed(refused)...)
	var te *kafkax.TopicError
	if !errors.As(err, &te) || te.Topic != refused {
		t.Fatalf("PrepareTopics: %v, want a *TopicError naming %s", err, refused)
	}
	if ctx.Err() != nil {
		t.Fatal("PrepareTopics waited for the deadline instead of failing at once")
	}
}

// TestPrepareTopicsWaitsForKafka: with nothing listening it retries until
// ctx ends and returns ctx's error.
func TestPrepareTopicsWaitsForKafka(t *testing.T) {
	t.Parallel()
	cfg := kafkax.Config{Partitions: 1, ReplicationFactor: 1}
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	err := kafkax.PrepareTopics(ctx, []string{"127.0.0.1:1"}, slog.New(slog.DiscardHandler), cfg.TopicsNamed("t")...)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("PrepareTopics without Kafka: %v, want the deadline", err)
	}
}

func deleteTopic(t *testing.T, brokers []string, name string) {
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	if _, err := client.DeleteTopics(context.Background(), &kafka.DeleteTopicsRequest{Topics: []string{name}}); err != nil {
		t.Logf("delete topic %s: %v", name, err)
	}
}
