package kafkax

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/notiflow/notiflow/lib/config"
	"github.com/segmentio/kafka-go"
)

// Header keys of the event contract.
const (
	HeaderContentType   = "content-type"
	HeaderSchemaVersion = "schema-version"
	HeaderRunID         = "run-id"
	HeaderTraceParent   = "traceparent"

	// ContentTypeProtobuf is the content type of every notiflow value.
	ContentTypeProtobuf = "application/x-protobuf"
	// SchemaVersion is the only schema version this build understands.
	SchemaVersion = "1"
)

// Dead-letter header keys, set on every record sent to the DLQ.
const (
	HeaderDLQError     = "dlq-error"
	HeaderDLQTopic     = "dlq-source-topic"
	HeaderDLQPartition = "dlq-source-partition"
	HeaderDLQOffset    = "dlq-source-offset"
	HeaderDLQService   = "dlq-service"
	HeaderDLQAttempts  = "dlq-attempts"
	HeaderDLQTime      = "dlq-time"
	// HeaderDLQTruncated is set, to the original length, when the value
	// was cut to fit the producer's limit.
	HeaderDLQTruncated = "dlq-truncated-from"
)

// Redrive header keys, set on a dead letter produced back to its source
// topic (see RedriveHeaders). They are not dlq-* headers: a redriven record
// that fails again keeps them, so its next dead letter carries the count.
const (
	// HeaderRedriveCount is how many times the record was redriven from
	// the DLQ (absent: never).
	HeaderRedriveCount = "redrive-count"
	// HeaderRedriveOf names the dead letter the record was redriven from:
	// "<dlq topic>/<partition>/<offset>".
	HeaderRedriveOf = "redrive-of"
)

// Config is the Kafka part of every service's configuration.
type Config struct {
	Brokers           []string      `env:"NOTIFLOW_KAFKA_BROKERS" default:"127.0.0.1:9092"`
	Partitions        int           `env:"NOTIFLOW_KAFKA_PARTITIONS" default:"12"`
	ReplicationFactor int           `env:"NOTIFLOW_KAFKA_REPLICATION_FACTOR" default:"1"`
	TopicDue          string        `env:"NOTIFLOW_TOPIC_DUE" default:"notify.due.v1"`
	TopicDispatched   string        `env:"NOTIFLOW_TOPIC_DISPATCHED" default:"notify.dispatched.v1"`
	TopicDLQ          string        `env:"NOTIFLOW_TOPIC_DLQ" default:"notify.dlq.v1"`
	MaxMessageBytes   int           `env:"NOTIFLOW_KAFKA_MAX_MESSAGE_BYTES" default:"1000000"`
	WriteTimeout      time.Duration `env:"NOTIFLOW_KAFKA_WRITE_TIMEOUT" default:"10s"`
}

// Validate reports the first setting that cannot work, naming its variable.
func (c Config) Validate() error {
	switch {
	case len(c.Brokers) == 0:
		return config.Errorf("NOTIFLOW_KAFKA_BROKERS", "at least one broker address is required")
	case c.Partitions < 1:
		return config.Errorf("NOTIFLOW_KAFKA_PARTITIONS", "must be at least 1, got %d", c.Partitions)
	case c.ReplicationFactor < 1:
		return config.Errorf("NOTIFLOW_KAFKA_REPLICATION_FACTOR", "must be at least 1, got %d", c.ReplicationFactor)
	case c.TopicDue == "" || c.TopicDispatched == "" || c.TopicDLQ == "":
		return config.Errorf("NOTIFLOW_TOPIC_*", "topic names must not be empty")
	case c.MaxMessageBytes < 1024:
		return config.Errorf("NOTIFLOW_KAFKA_MAX_MESSAGE_BYTES", "must be at least 1024, got %d", c.MaxMessageBytes)
	case c.WriteTimeout <= 0:
		return config.Errorf("NOTIFLOW_KAFKA_WRITE_TIMEOUT", "must be positive")
	}
	return nil
}

// Topics returns the specs of the three notiflow topics.
func (c Config) Topics() []kafka.TopicConfig {
	mk := func(name string) kafka.TopicConfig {
		return kafka.TopicConfig{Topic: name, NumPartitions: c.Partitions, ReplicationFactor: c.ReplicationFactor}
	}
	return []kafka.TopicConfig{mk(c.TopicDue), mk(c.TopicDispatched), mk(c.TopicDLQ)}
}

// EnsureTopics creates the topics that do not exist yet. Existing topics are
// left as they are, so it is safe to call from every replica at start. A
// topic Kafka refuses is reported as a *TopicError naming it.
func EnsureTopics(ctx context.Context, brokers []string, topics ...kafka.TopicConfig) error {
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 30 * time.Second}
	resp, err := client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: topics})
	if err != nil {
		return fmt.Errorf("create topics: %w", err)
	}
	var errs []error
	for name, terr := range resp.Errors {
		if terr != nil && !errors.Is(terr, kafka.TopicAlreadyExists) {
			errs = append(errs, &TopicError{Topic: name, Err: fmt.Errorf("create: %w", terr)})
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return waitForLeaders(ctx, client, topics)
}

// waitForLeaders polls metadata until every partition of the new topics has
// a leader, so that a producer started right after creation does not fail.
func waitForLeaders(ctx context.Context, client *kafka.Client, topics []kafka.TopicConfig) error {
	names := make([]string, len(topics))
	for i, t := range topics {
		names[i] = t.Topic
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: names})
		if err == nil {
			if err = topicsLed(md, names); err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("wait for topic leaders: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for topic leaders: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WriterOptions tune NewWriter. The zero value is the production default.
type WriterOptions struct {
	// BatchTimeout bounds how long a partial batch waits; default 2ms
	// (kafka-go's own default of 1s would stall every small write).
	BatchTimeout time.Duration
	// BatchSize is the most records in one produce request per partition;
	// default 1000.
	BatchSize int
	// WriteTimeout bounds one produce round trip; default Config's
	// (NOTIFLOW_KAFKA_WRITE_TIMEOUT's default tag).
	WriteTimeout time.Duration
	// MaxMessageBytes is the largest batch in bytes; default Config's
	// (NOTIFLOW_KAFKA_MAX_MESSAGE_BYTES's default tag).
	MaxMessageBytes int
}

// NewWriter returns a synchronous producer: acks from all in-sync replicas,
// murmur2 partitioning on the key (the partition a Java client would pick, so
// one recipient always lands on one partition), a short batch timeout, no
// automatic topic creation. Topic is left empty so that each message names
// its own; a dead-letter writer uses the same settings. The caller closes it.
func NewWriter(brokers []string, opt WriterOptions) *kafka.Writer {
	if opt.BatchTimeout <= 0 {
		opt.BatchTimeout = 2 * time.Millisecond
	}
	if opt.BatchSize <= 0 {
		opt.BatchSize = 1000
	}
	if opt.WriteTimeout <= 0 || opt.MaxMessageBytes <= 0 {
		// Config's tags are constants, which TestConfigDefaults loads:
		// FillZero cannot fail on them.
		var def Config
		_ = config.FillZero(&def)
		if opt.WriteTimeout <= 0 {
			opt.WriteTimeout = def.WriteTimeout
		}
		if opt.MaxMessageBytes <= 0 {
			opt.MaxMessageBytes = def.MaxMessageBytes
		}
	}
	return &kafka.Writer{
		Addr:                   kafka.TCP(brokers...),
		Balancer:               &kafka.Murmur2Balancer{},
		RequiredAcks:           kafka.RequireAll,
		BatchTimeout:           opt.BatchTimeout,
		BatchSize:              opt.BatchSize,
		BatchBytes:             int64(opt.MaxMessageBytes),
		WriteTimeout:           opt.WriteTimeout,
		ReadTimeout:            opt.WriteTimeout,
		MaxAttempts:            5,
		WriteBackoffMin:        50 * time.Millisecond,
		WriteBackoffMax:        time.Second,
		AllowAutoTopicCreation: false,
	}
}

// ContractHeaders returns the headers every notiflow event carries.
func ContractHeaders(runID string) []kafka.Header {
	h := []kafka.Header{
		{Key: HeaderContentType, Value: []byte(ContentTypeProtobuf)},
		{Key: HeaderSchemaVersion, Value: []byte(SchemaVersion)},
	}
	if runID != "" {
		h = append(h, kafka.Header{Key: HeaderRunID, Value: []byte(runID)})
	}
	return h
}

// Header returns the value of the first header named key, or nil.
func Header(hs []kafka.Header, key string) []byte {
	for _, h := range hs {
		if h.Key == key {
			return h.Value
		}
	}
	return nil
}

// ErrUnknownSchema marks a record whose schema-version header this build
// does not understand.
var ErrUnknownSchema = errors.New("unknown schema version")

// CheckSchema returns an error wrapping ErrUnknownSchema unless the record
// says it is of SchemaVersion. A record without the header is taken as the
// current version (producers outside notiflow may omit it).
func CheckSchema(hs []kafka.Header) error {
	v := Header(hs, HeaderSchemaVersion)
	if v == nil || string(v) == SchemaVersion {
		return nil
	}
	return fmt.Errorf("%w %q (this build reads %q)", ErrUnknownSchema, v, SchemaVersion)
}

// DeadLetter publishes records that cannot be processed to the DLQ topic,
// keeping the original key, value and headers (a redriven record's
// redrive-* headers among them) and adding the dlq-* headers.
// It is safe for concurrent use.
type DeadLetter struct {
	w       *kafka.Writer
	topic   string
	service string
}

// NewDeadLetter returns a DeadLetter writing with w to topic on behalf of
// service. w is not closed by DeadLetter.
func NewDeadLetter(w *kafka.Writer, topic, service string) *DeadLetter {
	return &DeadLetter{w: w, topic: topic, service: service}
}

// Topic is the dead-letter topic's name.
func (d *DeadLetter) Topic() string { return d.topic }

// Send writes msg to the DLQ with reason and the number of attempts made,
// and returns once Kafka acknowledged it (or ctx ended). A value larger than
// the producer's limit is truncated and says so in a header, so that the
// dead letter itself cannot be rejected.
func (d *DeadLetter) Send(ctx context.Context, msg kafka.Message, reason error, attempts int) error {
	return d.SendMany(ctx, []DeadRecord{{Msg: msg, Reason: reason, Attempts: attempts}})
}

// DeadRecord is one record for SendMany.
type DeadRecord struct {
	Msg      kafka.Message
	Reason   error
	Attempts int
}

// SendMany writes several dead letters in one produce call.
func (d *DeadLetter) SendMany(ctx context.Context, recs []DeadRecord) error {
	if len(recs) == 0 {
		return nil
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	out := make([]kafka.Message, len(recs))
	for i, r := range recs {
		reason := "unknown"
		if r.Reason != nil {
			reason = r.Reason.Error()
		}
		hs := make([]kafka.Header, 0, len(r.Msg.Headers)+8)
		hs = append(hs, r.Msg.Headers...)
		hs = append(hs,
			kafka.Header{Key: HeaderDLQError, Value: []byte(reason)},
			kafka.Header{Key: HeaderDLQTopic, Value: []byte(r.Msg.Topic)},
			kafka.Header{Key: HeaderDLQPartition, Value: []byte(strconv.Itoa(r.Msg.Partition))},
			kafka.Header{Key: HeaderDLQOffset, Value: []byte(strconv.FormatInt(r.Msg.Offset, 10))},
			kafka.Header{Key: HeaderDLQService, Value: []byte(d.service)},
			kafka.Header{Key: HeaderDLQAttempts, Value: []byte(strconv.Itoa(r.Attempts))},
			kafka.Header{Key: HeaderDLQTime, Value: []byte(now)},
		)
		value := r.Msg.Value
		if limit := int(d.w.BatchBytes) - 64*1024; limit > 0 && len(value) > limit {
			value = value[:limit]
			hs = append(hs, kafka.Header{Key: HeaderDLQTruncated, Value: []byte(strconv.Itoa(len(r.Msg.Value)))})
		}
		out[i] = kafka.Message{Topic: d.topic, Key: r.Msg.Key, Value: value, Headers: hs}
	}
	if err := d.w.WriteMessages(ctx, out...); err != nil {
		return fmt.Errorf("write %d record(s) to dead-letter topic %s: %w", len(out), d.topic, err)
	}
	return nil
}

// DeadLetterInfo is what a dead letter's headers say about it (see
// ParseDeadLetter).
type DeadLetterInfo struct {
	Reason    string // dlq-error
	Service   string // dlq-service: the service that dead-lettered it
	Topic     string // dlq-source-topic: where the record was read
	Partition int    // dlq-source-partition (-1: unknown)
	Offset    int64  // dlq-source-offset (-1: unknown)
	Attempts  int    // dlq-attempts
	// Redrives is the record's redrive-count (0: never redriven; -1: the
	// header is unreadable).
	Redrives int
	// Truncated is set when the value was cut to fit the producer's limit.
	Truncated bool
}

// ParseDeadLetter reads the dlq-* and redrive-* headers of a record of the
// DLQ topic. A header that is missing or unreadable leaves its zero value
// (-1 for the numbers where 0 is meaningful).
func ParseDeadLetter(hs []kafka.Header) DeadLetterInfo {
	num := func(key string) int64 {
		v := Header(hs, key)
		n, err := strconv.ParseInt(string(v), 10, 64)
		if v == nil || err != nil {
			return -1
		}
		return n
	}
	d := DeadLetterInfo{
		Reason: string(Header(hs, HeaderDLQError)), Service: string(Header(hs, HeaderDLQService)),
		Topic: string(Header(hs, HeaderDLQTopic)), Partition: int(num(HeaderDLQPartition)), Offset: num(HeaderDLQOffset),
		Attempts: max(int(num(HeaderDLQAttempts)), 0), Truncated: Header(hs, HeaderDLQTruncated) != nil,
	}
	if Header(hs, HeaderRedriveCount) != nil {
		d.Redrives = int(num(HeaderRedriveCount))
	}
	return d
}

// RedriveHeaders returns the headers of a dead letter produced back to its
// source topic: the original headers without the dlq-* and redrive-* ones,
// plus redrive-count set to count and redrive-of set to of.
func RedriveHeaders(hs []kafka.Header, count int, of string) []kafka.Header {
	out := make([]kafka.Header, 0, len(hs))
	for _, h := range hs {
		if strings.HasPrefix(h.Key, "dlq-") || strings.HasPrefix(h.Key, "redrive-") {
			continue
		}
		out = append(out, h)
	}
	return append(out,
		kafka.Header{Key: HeaderRedriveCount, Value: []byte(strconv.Itoa(count))},
		kafka.Header{Key: HeaderRedriveOf, Value: []byte(of)},
	)
}
