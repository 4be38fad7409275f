package app

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/consume"
	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/services/sink/internal/domain"
)

// fakeStore refuses any statement holding a notification id in bad (as
// MySQL refuses a whole statement for one bad row) and fails transiently
// while down is set.
type fakeStore struct {
	mu         sync.Mutex
	bad        map[string]bool
	down       bool
	rows       map[string]domain.Row
	statements int
}

func (s *fakeStore) Upsert(_ context.Context, rows []domain.Row) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.statements++
	if s.down {
		return errors.New("connection refused")
	}
	for _, r := range rows {
		if s.bad[r.NotificationID] {
			return fmt.Errorf("Error 1406: Data too long for column 'recipient_id': %w", domain.ErrRejected)
		}
	}
	for _, r := range rows {
		s.rows[r.NotificationID] = r
	}
	return nil
}

type fakeDLQ struct {
	recs []kafkax.DeadRecord
	err  error
}

func (d *fakeDLQ) SendMany(_ context.Context, recs []kafkax.DeadRecord) error {
	if d.err != nil {
		return d.err
	}
	d.recs = append(d.recs, recs...)
	return nil
}

func batch(n int) []*consume.Record[domain.Result] {
	out := make([]*consume.Record[domain.Result], n)
	for i := range n {
		id := "n" + strconv.Itoa(i)
		out[i] = &consume.Record[domain.Result]{
			Msg:   kafka.Message{Key: []byte(id), Offset: int64(i)},
			Value: domain.Result{NotificationID: id, Status: domain.StatusDelivered, DispatchedAt: time.Unix(int64(i), 0)},
		}
	}
	return out
}

func TestHandleBatchIsolatesRejectedRows(t *testing.T) {
	t.Parallel()
	store := &fakeStore{bad: map[string]bool{"n17": true, "n150": true}, rows: map[string]domain.Row{}}
	dlq := &fakeDLQ{}
	s := NewSink(store, dlq, NewMetrics(nil), time.Second)
	recs := batch(200)
	recs = append(recs, &consume.Record[domain.Result]{Msg: kafka.Message{Key: []byte("n17-again"), Offset: 200}, Value: recs[17].Value})
	if err := s.HandleBatch(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	if len(store.rows) != 198 {
		t.Fatalf("%d rows written, want 198", len(store.rows))
	}
	keys := map[string]bool{}
	for _, d := range dlq.recs {
		keys[string(d.Msg.Key)] = true
		if !errors.Is(d.Reason, domain.ErrRejected) {
			t.Errorf("reason %v does not carry the store's rejection", d.Reason)
		}
	}
	if len(dlq.recs) != 3 || !keys["n17"] || !keys["n17-again"] || !keys["n150"] {
		t.Fatalf("dead letters %v, want n17 (both records) and n150", keys)
	}
	if store.statements > 40 {
		t.Errorf("%d statements to isolate 2 rows of 200; bisection should need about 30", store.statements)
	}
}

func TestHandleBatchTransientErrorIsReturned(t *testing.T) {
	t.Parallel()
	store := &fakeStore{down: true, rows: map[string]domain.Row{}}
	dlq := &fakeDLQ{}
	m := NewMetrics(nil)
	s := NewSink(store, dlq, m, time.Second)
	if err := s.HandleBatch(context.Background(), batch(10)); err == nil {
		t.Fatal("nil error while the store is down: the runtime would commit unwritten records")
	}
	if len(dlq.recs) != 0 || store.statements != 1 {
		t.Fatalf("a transient error must not split the batch or dead letter: %d statements, %d dead", store.statements, len(dlq.recs))
	}
	store.down = false
	if err := s.HandleBatch(context.Background(), batch(10)); err != nil || len(store.rows) != 10 {
		t.Fatalf("after recovery: %v, %d rows", err, len(store.rows))
	}
}

func TestHandleBatchFailsWhenTheDLQFails(t *testing.T) {
	t.Parallel()
	store := &fakeStore{bad: map[string]bool{"n3": true}, rows: map[string]domain.Row{}}
	s := NewSink(store, &fakeDLQ{err: errors.New("kafka down")}, NewMetrics(nil), time.Second)
	if err := s.HandleBatch(context.Background(), batch(10)); err == nil {
		t.Fatal("nil error although the poison row reached no DLQ: it would vanish")
	}
}

func TestHandleNaive(t *testing.T) {
	t.Parallel()
	store := &fakeStore{bad: map[string]bool{"n1": true}, rows: map[string]domain.Row{}}
	s := NewSink(store, &fakeDLQ{}, NewMetrics(nil), time.Second)
	recs := batch(2)
	if err := s.Handle(context.Background(), recs[0]); err != nil {
		t.Fatal(err)
	}
	if err := s.Handle(context.Background(), recs[1]); !errors.Is(err, consume.ErrPermanent) {
		t.Fatalf("rejected row: %v, want a permanent error (dead letter at once)", err)
	}
	store.down = true
	if err := s.Handle(context.Background(), recs[0]); err == nil || errors.Is(err, consume.ErrPermanent) {
		t.Fatalf("transient error: %v, want a retryable error", err)
	}
}
