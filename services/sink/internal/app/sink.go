package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/notiflow/notiflow/lib/consume"
	"github.com/notiflow/notiflow/lib/kafkax"
	"github.com/notiflow/notiflow/services/sink/internal/domain"
)

// Store writes notification rows (adapters.Store). Upsert must be
// idempotent, must not see the same notification id twice in one call, and
// must wrap domain.ErrRejected when the database refused the data itself.
type Store interface {
	Upsert(ctx context.Context, rows []domain.Row) error
}

// DeadLetterer sends records to the dead-letter topic and returns once they
// are durable (kafkax.DeadLetter).
type DeadLetterer interface {
	SendMany(ctx context.Context, recs []kafkax.DeadRecord) error
}

// Sink persists dispatch results. Its methods are safe for concurrent use
// (several flushes run at once).
type Sink struct {
	store        Store
	dlq          DeadLetterer
	m            *Metrics
	flushTimeout time.Duration
}

// NewSink returns a Sink writing to store. flushTimeout bounds one
// statement, so that a database that hangs instead of failing still lets
// the batch be retried.
func NewSink(store Store, dlq DeadLetterer, m *Metrics, flushTimeout time.Duration) *Sink {
	return &Sink{store: store, dlq: dlq, m: m, flushTimeout: flushTimeout}
}

var (
	_ consume.BatchHandler[domain.Result] = (*Sink)(nil)
	_ consume.Handler[domain.Result]      = (*Sink)(nil)
)

// HandleBatch writes a batch of results as one multi-row upsert (after
// collapsing repeated notification ids). It returns nil once every row is
// durable, or once the rows the database refused were isolated and dead
// lettered and all the others are durable; only then may the runtime commit
// the batch's offsets. A transient failure (database down, connection
// lost, timeout) returns the error: the runtime keeps the records
// uncommitted and retries the whole batch with backoff, which is harmless
// because the upsert is idempotent. When ctx ends it returns promptly with
// ctx's error.
func (s *Sink) HandleBatch(ctx context.Context, recs []*consume.Record[domain.Result]) error {
	results := make([]*domain.Result, len(recs))
	for i, r := range recs {
		results[i] = &r.Value
	}
	rows := domain.Collapse(results)
	start := time.Now()
	rejected, err := s.write(ctx, rows)
	if err != nil {
		return err
	}
	if len(rejected) > 0 {
		var dead []kafkax.DeadRecord
		for _, rj := range rejected {
			for _, src := range rj.row.Sources {
				dead = append(dead, kafkax.DeadRecord{Msg: recs[src].Msg, Reason: rj.reason, Attempts: 1})
			}
		}
		if err := s.dlq.SendMany(ctx, dead); err != nil {
			// The other rows are durable already; retrying the batch
			// rewrites them (idempotent) and isolates the poison again.
			return fmt.Errorf("dead letter %d rejected record(s): %w", len(dead), err)
		}
		s.m.poisonRows.Add(float64(len(rejected)))
	}
	s.m.flushSeconds.Observe(time.Since(start).Seconds())
	s.m.batchRows.Observe(float64(len(rows)))
	s.m.results.Add(float64(len(recs)))
	return nil
}

type rejectedRow struct {
	row    *domain.Row
	reason error
}

// write upserts rows. When the database refuses the statement because of
// the data, it splits the rows in halves and retries each, down to single
// rows, which are returned as rejected with the database's reason; the
// rest are written. log2(len(rows)) levels: a 200-row batch with one bad
// row takes about 16 statements. A transient error at any level returns
// the error (the whole batch is retried later).
func (s *Sink) write(ctx context.Context, rows []domain.Row) ([]rejectedRow, error) {
	err := s.upsert(ctx, rows)
	if err == nil {
		return nil, nil
	}
	if !errors.Is(err, domain.ErrRejected) {
		return nil, err
	}
	if len(rows) == 1 {
		return []rejectedRow{{row: &rows[0], reason: err}}, nil
	}
	mid := len(rows) / 2
	left, err := s.write(ctx, rows[:mid])
	if err != nil {
		return nil, err
	}
	right, err := s.write(ctx, rows[mid:])
	if err != nil {
		return nil, err
	}
	return append(left, right...), nil
}

// upsert runs one statement under the flush timeout and keeps the metrics.
func (s *Sink) upsert(ctx context.Context, rows []domain.Row) error {
	sctx, cancel := context.WithTimeout(ctx, s.flushTimeout)
	err := s.store.Upsert(sctx, rows)
	cancel()
	switch {
	case err == nil:
		s.m.rowsWritten.Add(float64(len(rows)))
		s.m.SetDBUp(true)
	case errors.Is(err, domain.ErrRejected):
		s.m.flushErrors.WithLabelValues("rejected").Inc()
		s.m.SetDBUp(true)
	case ctx.Err() != nil:
		return ctx.Err()
	default:
		s.m.flushErrors.WithLabelValues("transient").Inc()
		s.m.SetDBUp(false)
	}
	return err
}

// Handle is the naive mode: one single-row upsert per record (the runtime
// then commits per record). A row the database refuses is dead lettered at
// once (consume.Permanent); a transient error is retried by the runtime.
func (s *Sink) Handle(ctx context.Context, rec *consume.Record[domain.Result]) error {
	start := time.Now()
	row := domain.RowOf(&rec.Value)
	err := s.upsert(ctx, []domain.Row{row})
	if errors.Is(err, domain.ErrRejected) {
		s.m.poisonRows.Inc()
		return consume.Permanent(err)
	}
	if err != nil {
		return err
	}
	s.m.flushSeconds.Observe(time.Since(start).Seconds())
	s.m.batchRows.Observe(1)
	s.m.results.Inc()
	return nil
}
