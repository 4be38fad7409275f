package ports

import (
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	"github.com/notiflow/notiflow/lib/consume"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
	"github.com/notiflow/notiflow/services/sink/internal/app"
	"github.com/notiflow/notiflow/services/sink/internal/domain"
)

// Decode turns a NotificationDispatched value into a Result. An error (not
// protobuf, invalid UTF-8, no notification id, unknown status, a time
// outside the DATETIME range) sends the record to the dead-letter topic
// before it reaches the sink.
func Decode(msg *kafka.Message) (domain.Result, error) {
	ev := eventPool.Get().(*notiflowv1.NotificationDispatched)
	defer eventPool.Put(ev)
	if err := unmarshal.Unmarshal(msg.Value, ev); err != nil {
		return domain.Result{}, fmt.Errorf("unmarshal NotificationDispatched: %w", err)
	}
	r := domain.Result{
		NotificationID:  ev.GetNotificationId(),
		TargetID:        ev.GetTargetId(),
		OccurrenceAt:    time.UnixMicro(ev.GetOccurrenceAtUs()).UTC(),
		RecipientID:     ev.GetRecipientId(),
		Sequence:        ev.GetSequence(),
		Channel:         ev.GetChannel().Name(),
		TemplateID:      ev.GetTemplateId(),
		TemplateVersion: ev.GetTemplateVersion(),
		Status:          status(ev.GetStatus()),
		OriginalStatus:  status(ev.GetOriginalStatus()),
		Attempts:        ev.GetAttempts(),
		ProviderCode:    ev.GetProviderCode(),
		Error:           ev.GetError(),
		Body:            ev.GetBody(),
		RunID:           ev.GetRunId(),
		DueAt:           time.UnixMicro(ev.GetDueAtUs()).UTC(),
		DispatchedAt:    time.UnixMicro(ev.GetDispatchedAtUs()).UTC(),
	}
	if err := r.Validate(); err != nil {
		return domain.Result{}, fmt.Errorf("invalid NotificationDispatched: %w", err)
	}
	return r, nil
}

// eventPool recycles decode targets: Unmarshal resets the message, and
// the strings it sets are fresh allocations that the Result keeps, so
// reusing the message itself is safe.
var eventPool = sync.Pool{New: func() any { return new(notiflowv1.NotificationDispatched) }}

var unmarshal = proto.UnmarshalOptions{}

// status is the stored status of s: "" for STATUS_UNSPECIFIED and for a
// value this build does not know, which Validate refuses as a Status and
// Row stores as unknown as an OriginalStatus.
func status(s notiflowv1.Status) domain.Status {
	if _, ok := notiflowv1.StatusByName(s.Name()); !ok {
		return ""
	}
	return domain.Status(s.Name())
}

// ConsumerConfig configures NewConsumer.
type ConsumerConfig struct {
	Brokers []string
	Topic   string
	Group   string
	// Naive selects one upsert and (about) one offset commit per record.
	Naive bool

	BatchSize        int
	BatchIdle        time.Duration
	BatchMaxAge      time.Duration
	FlushConcurrency int
	MaxInFlight      int
	DrainTimeout     time.Duration
	BackoffMax       time.Duration
	// FetchMinBytes is the batched mode's consume.Config.FetchMinBytes.
	FetchMinBytes int

	DLQ        consume.DeadLetterer
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// naiveCommitInterval is the commit loop period in naive mode: shorter
// than one INSERT, so that in practice every record is committed on its
// own, right after it was written.
const naiveCommitInterval = time.Millisecond

// NewConsumer returns the consumer that feeds sink.
//
// Batched mode (the default): the runtime's batch handler, a batch being
// handed over at BatchSize records, after BatchIdle without a record, or
// when its oldest record is BatchMaxAge old; FlushConcurrency batches are
// written at once. A batch that fails is retried until it succeeds
// (BatchMaxAttempts 0) while its records stay uncommitted and, the
// in-flight bound filling, fetching pauses.
//
// Naive mode: the per-record handler with one worker and one record at a
// time per partition (OrderPartition, Workers 1: one INSERT at a time in
// the whole process) and a commit loop every millisecond; transient
// errors are retried without limit, like the batched mode.
func NewConsumer(cfg ConsumerConfig, sink *app.Sink) (*consume.Consumer[domain.Result], error) {
	cc := consume.Config{
		Brokers:      cfg.Brokers,
		GroupID:      cfg.Group,
		Topics:       []string{cfg.Topic},
		Service:      "sink",
		MaxInFlight:  cfg.MaxInFlight,
		DrainTimeout: cfg.DrainTimeout,
		BackoffMin:   50 * time.Millisecond,
		BackoffMax:   cfg.BackoffMax,
		DLQ:          cfg.DLQ,
		Logger:       cfg.Logger,
		Registerer:   cfg.Registerer,
	}
	if cfg.Naive {
		cc.Ordering = consume.OrderPartition
		cc.Workers = 1
		cc.CommitInterval = naiveCommitInterval
		cc.MaxAttempts = math.MaxInt32
		return consume.New[domain.Result](cc, Decode, sink)
	}
	cc.BatchSize = cfg.BatchSize
	cc.BatchIdle = cfg.BatchIdle
	cc.BatchMaxAge = cfg.BatchMaxAge
	cc.BatchConcurrency = cfg.FlushConcurrency
	cc.FetchMinBytes = cfg.FetchMinBytes
	cc.BatchMaxAttempts = 0
	return consume.NewBatch[domain.Result](cc, Decode, sink)
}
