package adapters

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	"github.com/notiflow/notiflow/lib/kafkax"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
	"github.com/notiflow/notiflow/services/scheduler/internal/app"
	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// DuePublisher publishes due notifications to the due topic as protobuf
// NotificationDue values keyed by recipient id, with the contract headers.
//
// A failed publish never lands a recipient's later record before an
// earlier one. kafka-go's Writer splits one WriteMessages call into batches
// per partition (BatchSize records, BatchBytes bytes) and writes a
// partition's batches one after the other; a batch that fails for good
// does not stop the next. Were one call to carry two batches of a
// partition, the first could fail and the second land, and the re-publish
// from the relay's cursor would put the second batch's records before the
// first's. So Publish splits the notes into produce calls that each carry
// at most one writer batch per partition (grouped by the partition the
// writer's balancer picks, capped at its BatchSize and BatchBytes) and
// makes them one after the other, stopping at the first failure: a record
// is sent only after every earlier record of its partition was
// acknowledged. kafka-go's own retries (MaxAttempts) repeat one batch
// before the partition's next one starts, so they can duplicate records but
// not reorder them.
//
// It is safe for concurrent use, but callers that need per-recipient order
// must not publish concurrently, and the writer must serve this publisher
// alone (another caller's records could share its batches).
type DuePublisher struct {
	w     *kafka.Writer
	topic string
}

// NewDuePublisher returns a publisher writing to topic with w (from
// kafkax.NewWriter: acks from all replicas, murmur2 on the key). w is not
// closed by the publisher.
func NewDuePublisher(w *kafka.Writer, topic string) *DuePublisher {
	return &DuePublisher{w: w, topic: topic}
}

// Publish writes notes in order and returns once Kafka acknowledged all of
// them, or an error (some may then have been written: the caller
// re-publishes them, downstream deduplicates by notification id). A note
// that cannot be encoded is left out. When the outcome of each note is
// known (a note not encodable, per-message errors from the writer, a
// record over the writer's size limit) the error is an app.PublishErrors:
// nil for the notes acknowledged, ErrNotSent for those not tried because an
// earlier produce call failed, and for notes refused as too large or not
// encodable an error wrapping app.ErrUnpublishable. When ctx ends it
// returns ctx's error.
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
		err = p.produce(ctx, msgs)
	}
	if err = outcomes(err, len(notes), written, refused); err != nil {
		return fmt.Errorf("publish %d notifications to %s: %w", len(msgs), p.topic, err)
	}
	return nil
}

// produce writes msgs in the produce calls of produceCalls, one after the
// other, stopping at the first that fails. Its error is, when the outcome
// of each message is known, a kafka.WriteErrors indexed like msgs (see
// byMessage).
func (p *DuePublisher) produce(ctx context.Context, msgs []kafka.Message) error {
	calls, err := p.produceCalls(ctx, msgs)
	if err != nil {
		return err
	}
	for k, idx := range calls {
		batch := msgs
		if len(calls) > 1 {
			batch = make([]kafka.Message, len(idx))
			for j, i := range idx {
				batch[j] = msgs[i]
			}
		}
		if err := p.w.WriteMessages(ctx, batch...); err != nil {
			return fmt.Errorf("produce call %d of %d: %w", k+1, len(calls), byMessage(err, calls, k, len(msgs)))
		}
	}
	return nil
}

// ErrNotSent marks, in the kafka.WriteErrors of a failed Publish, the notes
// that were not tried because an earlier produce call failed.
var ErrNotSent = errors.New("not sent: an earlier produce call of this publish failed")

// byMessage re-indexes the error of failed produce call k like the
// publish's n messages: nil for the messages of earlier calls
// (acknowledged), ErrNotSent for those of later calls, and for call k's
// own messages their entries of a kafka.WriteErrors, or the writer's
// MessageTooLargeError (it refused the call before writing any of it). Any
// other error is returned as it is.
func byMessage(err error, calls [][]int, k, n int) error {
	var (
		werr   kafka.WriteErrors
		tooBig kafka.MessageTooLargeError
	)
	perMsg := errors.As(err, &werr) && len(werr) == len(calls[k])
	if !perMsg && !errors.As(err, &tooBig) {
		return err
	}
	out := make(kafka.WriteErrors, n)
	for _, idx := range calls[k+1:] {
		for _, i := range idx {
			out[i] = ErrNotSent
		}
	}
	for j, i := range calls[k] {
		if perMsg {
			out[i] = werr[j]
		} else {
			out[i] = err
		}
	}
	return out
}

// kafka-go's Writer defaults for a zero BatchSize and BatchBytes.
const (
	writerBatchSize  = 100
	writerBatchBytes = 1 << 20
)

// produceCalls groups msgs into the produce calls Publish makes, as lists
// of indexes into msgs: per partition (as the writer's balancer picks it,
// over the topic's current partition count) records keep their order, and
// each call holds at most one writer batch of any partition. The count is
// read apart from the writer's own: partitions added to the topic between
// the two reads can make the writer group a call differently. Adding
// partitions moves keys to other partitions anyway, which breaks
// per-recipient order on its own; do it only with the relay stopped.
func (p *DuePublisher) produceCalls(ctx context.Context, msgs []kafka.Message) ([][]int, error) {
	if p.w.Balancer == nil {
		return nil, errors.New("the writer has no Balancer: records of one recipient would spread over partitions")
	}
	client := &kafka.Client{Addr: p.w.Addr, Transport: p.w.Transport, Timeout: p.w.ReadTimeout}
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{p.topic}}) // served from the transport's cache
	if err != nil {
		return nil, fmt.Errorf("read partition count: %w", err)
	}
	var parts []int
	for _, t := range md.Topics {
		if t.Name != p.topic {
			continue
		}
		if t.Error != nil {
			return nil, fmt.Errorf("read partition count: %w", t.Error)
		}
		parts = make([]int, len(t.Partitions))
		for i := range parts {
			parts[i] = i
		}
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("read partition count: %w", kafka.UnknownTopicOrPartition)
	}
	maxCount, maxBytes := p.w.BatchSize, p.w.BatchBytes
	if maxCount <= 0 {
		maxCount = writerBatchSize
	}
	if maxBytes <= 0 {
		maxBytes = writerBatchBytes
	}
	return splitByBatch(msgs, func(m kafka.Message) int { return p.w.Balancer.Balance(m, parts...) }, maxCount, maxBytes), nil
}

// splitByBatch groups msgs into calls, as lists of indexes into msgs, such
// that per partition records keep their order and each call holds at most
// maxCount records and maxBytes bytes (as kafka-go's Writer counts them)
// of any one partition: the writer fills one batch per partition from it.
// A record larger than maxBytes gets a call with nothing else in it: the
// writer refuses a whole call for one such record, and the records of
// other partitions then need not share its fate.
func splitByBatch(msgs []kafka.Message, partition func(kafka.Message) int, maxCount int, maxBytes int64) [][]int {
	type fill struct {
		call, n int
		bytes   int64
	}
	fills := map[int]*fill{}
	solo := map[int]bool{} // calls holding one oversized record
	next := func(c int) int {
		for c++; solo[c]; c++ {
		}
		return c
	}
	var calls [][]int
	for i := range msgs {
		size := recordBytes(&msgs[i])
		part := partition(msgs[i])
		f := fills[part]
		if size > maxBytes {
			solo[len(calls)] = true
			calls = append(calls, []int{i})
			// The partition's next record starts a call after this one.
			fills[part] = &fill{call: len(calls) - 1, n: maxCount}
			continue
		}
		switch {
		case f == nil:
			f = &fill{call: next(-1)}
			fills[part] = f
		case f.n == maxCount || f.bytes+size > maxBytes:
			*f = fill{call: next(f.call)}
		}
		if f.call == len(calls) {
			calls = append(calls, nil)
		}
		calls[f.call] = append(calls[f.call], i)
		f.n++
		f.bytes += size
	}
	return calls
}

// recordBytes is what kafka-go's Writer counts for m against BatchBytes
// (its Message.totalSize): 22 bytes of framing, key, value and
// varint-framed headers.
func recordBytes(m *kafka.Message) int64 {
	n := 22 + len(m.Key) + len(m.Value) + varintLen(len(m.Headers))
	for _, h := range m.Headers {
		n += varintLen(len(h.Key)) + len(h.Key) + varintLen(len(h.Value)) + len(h.Value)
	}
	return int64(n)
}

func varintLen(n int) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutVarint(b[:], int64(n))
}

func fillDue(pb *notiflowv1.NotificationDue, n *domain.Notification) {
	pb.NotificationId = n.ID
	pb.TargetId = uint64(n.TargetID)
	pb.RecipientId = n.RecipientID
	// A channel the contract does not name stays CHANNEL_UNSPECIFIED.
	pb.Channel, _ = notiflowv1.ChannelByName(string(n.Channel))
	pb.TemplateId = n.TemplateID
	pb.ParamsJson = n.Params
	pb.WebhookUrl = n.WebhookURL
	pb.DueAtUs = n.DueAt.UnixMicro()
	pb.OccurrenceAtUs = n.OccurrenceAt.UnixMicro()
	pb.Sequence = n.Sequence
	pb.RunId = n.RunID
	pb.CreatedAtUs = n.CreatedAt.UnixMicro()
	pb.WebhookSecretRequired = n.SecretRequired
	pb.TargetVersion = n.TargetVersion
}

// DecodeDue parses a NotificationDue value (for tests and tools).
func DecodeDue(value []byte) (*notiflowv1.NotificationDue, error) {
	var pb notiflowv1.NotificationDue
	if err := proto.Unmarshal(value, &pb); err != nil {
		return nil, fmt.Errorf("decode NotificationDue: %w", err)
	}
	return &pb, nil
}
