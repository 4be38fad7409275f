package adapters

import (
	"context"
	"fmt"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	"github.com/notiflow/notiflow/lib/kafkax"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
	"github.com/notiflow/notiflow/services/scheduler/internal/app"
	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// MessageWriter is the part of *kafka.Writer the publisher uses.
type MessageWriter interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
}

// DuePublisher publishes due notifications to the due topic as protobuf
// NotificationDue values keyed by recipient id, with the contract headers.
// It is safe for concurrent use, but callers that need per-recipient order
// must not publish concurrently.
type DuePublisher struct {
	w     MessageWriter
	topic string
}

// NewDuePublisher returns a publisher writing to topic with w (from
// kafkax.NewWriter: acks from all replicas, murmur2 on the key). w is not
// closed by the publisher.
func NewDuePublisher(w MessageWriter, topic string) *DuePublisher {
	return &DuePublisher{w: w, topic: topic}
}

// Publish writes notes in order in one produce call and returns once Kafka
// acknowledged all of them, or an error (some may then have been written:
// the caller re-publishes them, downstream deduplicates by notification
// id). A note that cannot be encoded is left out of the call. When the
// outcome of each note is known (a note not encodable, per-message errors
// from the writer, a record over the writer's size limit) the error is an
// app.PublishErrors, whose entries for notes refused as too large or not
// encodable wrap app.ErrUnpublishable. When ctx ends it returns ctx's
// error.
func (p *DuePublisher) Publish(ctx context.Context, notes []domain.Notification) error {
	if len(notes) == 0 {
		return nil
	}
	msgs := make([]kafka.Message, 0, len(notes))
	written := make([]int, 0, len(notes)) // msgs[j] is notes[written[j]]
	var refused app.PublishErrors         // notes not encodable
	headers := map[string][]kafka.Header{}
	opts := proto.MarshalOptions{}
	var pb notiflowv1.NotificationDue
	for i := range notes {
		n := &notes[i]
		fillDue(&pb, n)
		value, err := opts.Marshal(&pb)
		if err != nil {
			if refused == nil {
				refused = make(app.PublishErrors, len(notes))
			}
			refused[i] = fmt.Errorf("%w: encode notification %s: %w", app.ErrUnpublishable, n.ID, err)
			continue
		}
		h, ok := headers[n.RunID]
		if !ok {
			h = kafkax.ContractHeaders(n.RunID)
			headers[n.RunID] = h
		}
		msgs = append(msgs, kafka.Message{Topic: p.topic, Key: []byte(n.RecipientID), Value: value, Headers: h})
		written = append(written, i)
	}
	var err error
	if len(msgs) > 0 {
		err = p.w.WriteMessages(ctx, msgs...)
	}
	if err = outcomes(err, len(notes), written, refused); err != nil {
		return fmt.Errorf("publish %d notifications to %s: %w", len(msgs), p.topic, err)
	}
	return nil
}

var channels = map[domain.Channel]notiflowv1.Channel{
	domain.ChannelWebhook: notiflowv1.Channel_CHANNEL_WEBHOOK,
	domain.ChannelInbox:   notiflowv1.Channel_CHANNEL_INBOX,
	domain.ChannelSim:     notiflowv1.Channel_CHANNEL_SIM,
}

func fillDue(pb *notiflowv1.NotificationDue, n *domain.Notification) {
	pb.NotificationId = n.ID
	pb.TargetId = uint64(n.TargetID)
	pb.RecipientId = n.RecipientID
	pb.Channel = channels[n.Channel]
	pb.TemplateId = n.TemplateID
	pb.ParamsJson = n.Params
	pb.WebhookUrl = n.WebhookURL
	pb.DueAtUs = n.DueAt.UnixMicro()
	pb.OccurrenceAtUs = n.OccurrenceAt.UnixMicro()
	pb.Sequence = n.Sequence
	pb.RunId = n.RunID
	pb.CreatedAtUs = n.CreatedAt.UnixMicro()
}

// DecodeDue parses a NotificationDue value (for tests and tools).
func DecodeDue(value []byte) (*notiflowv1.NotificationDue, error) {
	var pb notiflowv1.NotificationDue
	if err := proto.Unmarshal(value, &pb); err != nil {
		return nil, fmt.Errorf("decode NotificationDue: %w", err)
	}
	return &pb, nil
}
