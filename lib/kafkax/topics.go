package kafkax

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"
)

// TopicError is Kafka's answer about one topic: it refused to create it, or
// its metadata shows it missing or without a leader.
type TopicError struct {
	Topic string
	Err   error
}

func (e *TopicError) Error() string { return fmt.Sprintf("kafka topic %s: %v", e.Topic, e.Err) }
func (e *TopicError) Unwrap() error { return e.Err }

// TopicsNamed returns the specs of the named topics (each once, in the order
// given) with c's partition count and replication factor.
func (c Config) TopicsNamed(names ...string) []kafka.TopicConfig {
	out := make([]kafka.TopicConfig, 0, len(names))
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			out = append(out, kafka.TopicConfig{Topic: n, NumPartitions: c.Partitions, ReplicationFactor: c.ReplicationFactor})
		}
	}
	return out
}

// PrepareTopics is every service's start-up topic check: it creates the
// topics the service reads or writes (EnsureTopics) and waits for their
// leaders. While Kafka cannot be reached it retries with a growing pause
// (1s to 15s), logging each attempt, so a service started before Kafka
// waits for it; a topic Kafka refuses fails at once with a *TopicError
// naming the topic. It returns when ctx ends, with ctx's error.
func PrepareTopics(ctx context.Context, brokers []string, log *slog.Logger, topics ...kafka.TopicConfig) error {
	pause := time.Second
	for try := 1; ; try++ {
		err := EnsureTopics(ctx, brokers, topics...)
		if err == nil {
			return nil
		}
		var te *TopicError
		if errors.As(err, &te) || ctx.Err() != nil {
			return fmt.Errorf("ensure kafka topics: %w", err)
		}
		log.Warn("ensure kafka topics; retrying", "err", err, "attempt", try)
		select {
		case <-ctx.Done():
			return fmt.Errorf("ensure kafka topics: %w", ctx.Err())
		case <-time.After(pause):
		}
		pause = min(2*pause, 15*time.Second)
	}
}

// HealthCheck returns the readiness check of a service's Kafka: the brokers
// answer a metadata request for topics within two seconds (or ctx's
// deadline, if sooner), and every one of those topics exists with a leader
// for each partition. A failure names the topic (*TopicError) or says the
// metadata request failed. The check is safe for concurrent use.
func HealthCheck(brokers []string, topics ...string) func(ctx context.Context) error {
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 2 * time.Second}
	return func(ctx context.Context) error {
		md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: topics})
		if err != nil {
			return fmt.Errorf("kafka metadata: %w", err)
		}
		return topicsLed(md, topics)
	}
}

// topicsLed reports the first of names that md shows missing, failed or
// with a partition without a leader.
func topicsLed(md *kafka.MetadataResponse, names []string) error {
	byName := make(map[string]kafka.Topic, len(md.Topics))
	for _, t := range md.Topics {
		byName[t.Name] = t
	}
	for _, n := range names {
		t, ok := byName[n]
		switch {
		case !ok:
			return &TopicError{Topic: n, Err: errors.New("not in the metadata")}
		case t.Error != nil:
			return &TopicError{Topic: n, Err: t.Error}
		case len(t.Partitions) == 0:
			return &TopicError{Topic: n, Err: errors.New("no partitions")}
		}
		for _, p := range t.Partitions {
			if p.Error != nil || p.Leader.Host == "" {
				return &TopicError{Topic: n, Err: fmt.Errorf("partition %d has no leader", p.ID)}
			}
		}
	}
	return nil
}
