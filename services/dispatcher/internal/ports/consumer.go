// Package ports connects the dispatcher's use case to its inputs: the
// consumer of notify.due.v1 built on the shared consumer runtime.
package ports

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	"github.com/notiflow/notiflow/lib/consume"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
	"github.com/notiflow/notiflow/services/dispatcher/internal/config"
)

// DecodeDue parses a NotificationDue value. A value that does not parse or
// lacks a notification or recipient id is rejected: the consumer runtime
// dead-letters it without calling the handler.
func DecodeDue(msg *kafka.Message) (*notiflowv1.NotificationDue, error) {
	var due notiflowv1.NotificationDue
	if err := proto.Unmarshal(msg.Value, &due); err != nil {
		return nil, fmt.Errorf("decode NotificationDue: %w", err)
	}
	switch {
	case due.NotificationId == "":
		return nil, errors.New("NotificationDue without notification_id")
	case due.RecipientId == "":
		return nil, errors.New("NotificationDue without recipient_id")
	}
	return &due, nil
}

// ConsumerConfig is the consumer runtime configuration of the dispatcher.
func ConsumerConfig(cfg config.Config, dlq consume.DeadLetterer, log *slog.Logger, reg prometheus.Registerer) consume.Config {
	return consume.Config{
		Brokers:                 cfg.Kafka.Brokers,
		GroupID:                 cfg.Group,
		Topics:                  []string{cfg.Kafka.TopicDue},
		Service:                 "dispatcher",
		Ordering:                cfg.OrderingMode(),
		Workers:                 cfg.Workers,
		MaxInFlight:             cfg.MaxInFlight,
		MaxInFlightPerPartition: cfg.MaxInFlightPerPartition,
		CommitInterval:          cfg.CommitInterval,
		DrainTimeout:            cfg.DrainTimeout,
		DLQ:                     dlq,
		Logger:                  log,
		Registerer:              reg,
	}
}

// NewConsumer returns the consumer of due notifications handing each
// record to h.
func NewConsumer(cfg config.Config, h consume.Handler[*notiflowv1.NotificationDue], dlq consume.DeadLetterer,
	log *slog.Logger, reg prometheus.Registerer) (*consume.Consumer[*notiflowv1.NotificationDue], error) {
	c, err := consume.New(ConsumerConfig(cfg, dlq, log, reg), DecodeDue, h)
	if err != nil {
		return nil, fmt.Errorf("build consumer: %w", err)
	}
	return c, nil
}
