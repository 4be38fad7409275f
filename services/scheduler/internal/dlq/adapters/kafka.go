package adapters

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/services/scheduler/internal/dlq"
)

// TopicLog reads one topic by time window. It is safe for concurrent use.
type TopicLog struct {
	brokers []string
	topic   string
	client  *kafka.Client
}

var _ dlq.Log = (*TopicLog)(nil)

// NewTopicLog returns a TopicLog over topic.
func NewTopicLog(brokers []string, topic string) *TopicLog {
	return &TopicLog{brokers: brokers, topic: topic, client: &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}}
}

// span is the offsets [start, end) of one partition that hold the window.
type span struct {
	partition  int
	start, end int64
}

// Read calls fn with each record whose timestamp is in [from, to),
// partition by partition. It asks Kafka for the first offset at or after
// from and the first at or after to (ListOffsets by time) and reads only
// the offsets between them, so a small window of a large topic costs a
// small read. A record in that range with a timestamp outside the window
// (producers set timestamps) is not passed to fn. It returns when every
// partition's range is read, fn stopped each, or ctx ends.
func (l *TopicLog) Read(ctx context.Context, from, to time.Time, fn func(kafka.Message) bool) error {
	spans, err := l.spans(ctx, from, to)
	if err != nil {
		return err
	}
	for _, sp := range spans {
		if err := l.readSpan(ctx, sp, from, to, fn); err != nil {
			return err
		}
	}
	return nil
}

func (l *TopicLog) spans(ctx context.Context, from, to time.Time) ([]span, error) {
	md, err := l.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{l.topic}})
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", l.topic, err)
	}
	if len(md.Topics) != 1 || md.Topics[0].Error != nil {
		var terr error
		if len(md.Topics) == 1 {
			terr = md.Topics[0].Error
		}
		return nil, fmt.Errorf("metadata of %s: %v", l.topic, terr)
	}
	var parts []int
	for _, p := range md.Topics[0].Partitions {
		parts = append(parts, p.ID)
	}
	sort.Ints(parts)
	list := func(mk func(p int) kafka.OffsetRequest) (map[int]kafka.PartitionOffsets, error) {
		reqs := make([]kafka.OffsetRequest, len(parts))
		for i, p := range parts {
			reqs[i] = mk(p)
		}
		resp, err := l.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{l.topic: reqs}})
		if err != nil {
			return nil, fmt.Errorf("list offsets of %s: %w", l.topic, err)
		}
		out := map[int]kafka.PartitionOffsets{}
		for _, po := range resp.Topics[l.topic] {
			if po.Error != nil {
				return nil, fmt.Errorf("list offsets of %s/%d: %w", l.topic, po.Partition, po.Error)
			}
			out[po.Partition] = po
		}
		return out, nil
	}
	last, err := list(kafka.LastOffsetOf)
	if err != nil {
		return nil, err
	}
	starts, err := list(func(p int) kafka.OffsetRequest { return kafka.TimeOffsetOf(p, from) })
	if err != nil {
		return nil, err
	}
	ends, err := list(func(p int) kafka.OffsetRequest { return kafka.TimeOffsetOf(p, to) })
	if err != nil {
		return nil, err
	}
	// A time query answers the first offset whose timestamp is at or
	// after the time, or -1 when there is none (then: the end).
	at := func(po kafka.PartitionOffsets, end int64) int64 {
		for off := range po.Offsets {
			if off >= 0 {
				return off
			}
		}
		return end
	}
	var spans []span
	for _, p := range parts {
		end := last[p].LastOffset
		sp := span{partition: p, start: at(starts[p], end), end: at(ends[p], end)}
		if sp.start < sp.end {
			spans = append(spans, sp)
		}
	}
	return spans, nil
}

func (l *TopicLog) readSpan(ctx context.Context, sp span, from, to time.Time, fn func(kafka.Message) bool) error {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: l.brokers, Topic: l.topic, Partition: sp.partition, MinBytes: 1, MaxBytes: 16 << 20, MaxWait: 100 * time.Millisecond,
	})
	defer r.Close()
	if err := r.SetOffset(sp.start); err != nil {
		return fmt.Errorf("seek %s/%d to %d: %w", l.topic, sp.partition, sp.start, err)
	}
	for {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				err = ctx.Err()
			}
			return fmt.Errorf("read %s/%d at %d: %w", l.topic, sp.partition, sp.start, err)
		}
		if m.Offset >= sp.end {
			return nil
		}
		if !m.Time.Before(from) && m.Time.Before(to) && !fn(m) {
			return nil
		}
		if m.Offset >= sp.end-1 {
			return nil
		}
	}
}
