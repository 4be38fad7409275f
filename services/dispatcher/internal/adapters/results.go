package adapters

import (
	"context"
	"fmt"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	"github.com/notiflow/notiflow/lib/kafkax"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
)

// Results publishes NotificationDispatched events (key = recipient id,
// contract headers) with a shared synchronous writer. It is safe for
// concurrent use; kafka-go batches concurrent calls per partition.
type Results struct {
	w     *kafka.Writer
	topic string
}

// NewResults returns a publisher writing to topic with w (not closed by
// Results).
func NewResults(w *kafka.Writer, topic string) *Results { return &Results{w: w, topic: topic} }

// Publish writes res and returns once Kafka acknowledged it (acks=all) or
// ctx ended.
func (r *Results) Publish(ctx context.Context, res *notiflowv1.NotificationDispatched) error {
	value, err := proto.Marshal(res)
	if err != nil {
		return fmt.Errorf("encode result of %s: %w", res.NotificationId, err)
	}
	msg := kafka.Message{Topic: r.topic, Key: []byte(res.RecipientId), Value: value, Headers: kafkax.ContractHeaders(res.RunId)}
	if err := r.w.WriteMessages(ctx, msg); err != nil {
		return fmt.Errorf("publish result of %s to %s: %w", res.NotificationId, r.topic, err)
	}
	return nil
}
