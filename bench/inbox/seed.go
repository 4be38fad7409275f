package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	"github.com/notiflow/notiflow/lib/kafkax"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
)

// HeavyRecipient is the recipient whose inbox the benchmark reads.
const HeavyRecipient = "inbox-bench-heavy"

// produceChunk is the number of records handed to the writer at once.
const produceChunk = 10_000

// epoch is the dispatched time of record 0; record i is dispatched
// i*Spacing later, so the data (and a report's figures) do not depend on
// the day of the run.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Spec describes the seeded table: Rows notifications with target ids
// 1..Rows, one per target. Every HeavyEvery-th row (HeavyItems rows in all)
// is an inbox notification of HeavyRecipient; the others go round-robin to
// Recipients other recipients over the webhook, inbox and sim channels, a
// tenth of them failed.
type Spec struct {
	Rows       int
	HeavyItems int
	Recipients int
	// Spacing is the time between two consecutive rows' dispatched_at.
	Spacing time.Duration
}

// Validate reports a spec that cannot be seeded.
func (s Spec) Validate() error {
	switch {
	case s.Rows < 1 || s.HeavyItems < 1 || s.Recipients < 1:
		return errors.New("rows, heavy items and recipients must be positive")
	case s.HeavyItems > s.Rows:
		return fmt.Errorf("heavy items (%d) exceed rows (%d)", s.HeavyItems, s.Rows)
	case s.Spacing <= 0:
		return errors.New("spacing must be positive")
	}
	return nil
}

// heavyEvery is the stride of the heavy recipient's rows.
func (s Spec) heavyEvery() int { return s.Rows / s.HeavyItems }

// isHeavy reports whether row i belongs to the heavy recipient.
func (s Spec) isHeavy(i int) bool {
	k := s.heavyEvery()
	return i%k == 0 && i/k < s.HeavyItems
}

var otherChannels = []notiflowv1.Channel{notiflowv1.Channel_CHANNEL_WEBHOOK, notiflowv1.Channel_CHANNEL_INBOX, notiflowv1.Channel_CHANNEL_SIM}

// Event returns row i (0-based) as the dispatcher would have produced it.
func (s Spec) Event(i int) *notiflowv1.NotificationDispatched {
	at := epoch.Add(time.Duration(i) * s.Spacing)
	ev := &notiflowv1.NotificationDispatched{
		NotificationId: fmt.Sprintf("inbox-bench-%08d", i),
		TargetId:       uint64(i + 1),
		OccurrenceAtUs: at.UnixMicro(),
		Sequence:       uint64(i),
		TemplateId:     "inbox-bench",
		Status:         notiflowv1.Status_STATUS_DELIVERED,
		Attempts:       1,
		ProviderCode:   200,
		Body:           fmt.Sprintf(`{"title":"notification %d","text":"seeded by the inbox benchmark"}`, i),
		DueAtUs:        at.Add(-50 * time.Millisecond).UnixMicro(),
		DispatchedAtUs: at.UnixMicro(),
	}
	if s.isHeavy(i) {
		ev.RecipientId, ev.Channel = HeavyRecipient, notiflowv1.Channel_CHANNEL_INBOX
		return ev
	}
	ev.RecipientId = fmt.Sprintf("inbox-bench-r%06d", i%s.Recipients)
	ev.Channel = otherChannels[i%len(otherChannels)]
	if i%10 == 3 {
		ev.Status, ev.Attempts, ev.ProviderCode, ev.Error = notiflowv1.Status_STATUS_FAILED, 3, 503, "provider unavailable"
	}
	return ev
}

// Produce writes the spec's rows to topic as NotificationDispatched
// records keyed by recipient (as the dispatcher writes them), in chunks,
// calling progress after each chunk with the number written so far. It
// returns when every record is acknowledged or ctx ends.
func Produce(ctx context.Context, brokers []string, topic string, s Spec, progress func(done int)) error {
	if err := s.Validate(); err != nil {
		return err
	}
	w := kafkax.NewWriter(brokers, kafkax.WriterOptions{BatchTimeout: 20 * time.Millisecond, BatchSize: 5000})
	defer w.Close()
	headers := kafkax.ContractHeaders("")
	msgs := make([]kafka.Message, 0, produceChunk)
	for i := 0; i < s.Rows; i++ {
		ev := s.Event(i)
		v, err := proto.Marshal(ev)
		if err != nil {
			return fmt.Errorf("marshal row %d: %w", i, err)
		}
		msgs = append(msgs, kafka.Message{Topic: topic, Key: []byte(ev.RecipientId), Value: v, Headers: headers})
		if len(msgs) == produceChunk || i == s.Rows-1 {
			if err := w.WriteMessages(ctx, msgs...); err != nil {
				return fmt.Errorf("produce rows up to %d to %s: %w", i, topic, err)
			}
			msgs = msgs[:0]
			if progress != nil {
				progress(i + 1)
			}
		}
	}
	return nil
}
