package adapters

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notiflow/notiflow/services/scheduler/internal/dlq"
)

// Marks keeps the redrive marks in Redis: one key per redriven dead letter,
// <prefix>dlq:redriven:<topic>:<partition>:<offset>, holding the time of
// the redrive and expiring after ttl (longer than the DLQ's retention is
// enough). It is safe for concurrent use.
type Marks struct {
	rdb    *redis.Client
	prefix string
	ttl    time.Duration
}

var _ dlq.Marks = (*Marks)(nil)

// NewMarks returns the marks of the dead letters of topic under prefix.
func NewMarks(rdb *redis.Client, prefix, topic string, ttl time.Duration) *Marks {
	return &Marks{rdb: rdb, prefix: prefix + "dlq:redriven:" + topic + ":", ttl: ttl}
}

func (m *Marks) key(r dlq.Record) string {
	return m.prefix + strconv.Itoa(r.Partition) + ":" + strconv.FormatInt(r.Offset, 10)
}

// Marked reports which of recs are marked (one MGET).
func (m *Marks) Marked(ctx context.Context, recs []dlq.Record) ([]bool, error) {
	out := make([]bool, len(recs))
	if len(recs) == 0 {
		return out, nil
	}
	keys := make([]string, len(recs))
	for i, r := range recs {
		keys[i] = m.key(r)
	}
	vals, err := m.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("mget %d redrive marks: %w", len(keys), err)
	}
	for i, v := range vals {
		out[i] = v != nil
	}
	return out, nil
}

// Mark sets r's mark unless it is there (SET NX).
func (m *Marks) Mark(ctx context.Context, r dlq.Record) (bool, error) {
	ok, err := m.rdb.SetNX(ctx, m.key(r), time.Now().UTC().Format(time.RFC3339Nano), m.ttl).Result()
	if err != nil {
		return false, fmt.Errorf("set redrive mark: %w", err)
	}
	return ok, nil
}

// Unmark deletes the marks of recs.
func (m *Marks) Unmark(ctx context.Context, recs []dlq.Record) error {
	if len(recs) == 0 {
		return nil
	}
	keys := make([]string, len(recs))
	for i, r := range recs {
		keys[i] = m.key(r)
	}
	if err := m.rdb.Del(ctx, keys...).Err(); err != nil {
		return fmt.Errorf("delete %d redrive marks: %w", len(keys), err)
	}
	return nil
}
