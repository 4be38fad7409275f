package app

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// OutboxStore is the outbox as the relay sees it: rows in id order and a
// cursor below which every row was published.
type OutboxStore interface {
	// PublishedUpTo returns the cursor.
	PublishedUpTo(ctx context.Context) (uint64, error)
	// Unpublished returns up to limit rows above afterID in id order;
	// Sequence is the row id. Rows never appear behind a cursor that has
	// seen the rows above them.
	Unpublished(ctx context.Context, afterID uint64, limit int) ([]domain.Notification, error)
	// MarkPublished moves the cursor forward to upTo.
	MarkPublished(ctx context.Context, upTo uint64, at time.Time) error
}

// Publisher publishes notifications in order and returns once all are
// acknowledged. A publish that fails never lands a record of a key before
// every earlier record of that key was acknowledged, so re-publishing from
// the cursor keeps each key's first appearances in order.
type Publisher interface {
	Publish(ctx context.Context, notes []domain.Notification) error
}

// markTimeout bounds one MarkPublished call. Marking runs even after the
// pass failed or the lease ended: rows already acknowledged by Kafka are
// best marked, to spare downstream a duplicate.
const markTimeout = 10 * time.Second

// Relay publishes the outbox to Kafka. A pass reads the rows after the
// stored cursor in id order, publishes each batch (Publisher.Publish),
// and after the acknowledgement moves the cursor past the batch (one small
// UPDATE per batch rather than one per row); reading the next batch,
// publishing and marking overlap (a three-stage pipeline), but batches are
// published one after the other, so per-key order follows outbox order. A
// crash between publish and mark leaves the cursor behind: the next pass
// publishes those rows again with the same notification ids.
//
// Passes are serialised; a Relay is safe for concurrent use.
type Relay struct {
	store OutboxStore
	pub   Publisher
	batch int
	clock func() time.Time
	m     *Metrics

	mu sync.Mutex

	// AfterPublish, when set, runs after each acknowledged batch and
	// before it is marked; an error ends the pass without marking that
	// batch. It is a fault-injection point for tests; nil in production.
	AfterPublish func(ctx context.Context, notes []domain.Notification) error
}

// NewRelay returns a relay reading batch rows at a time.
func NewRelay(store OutboxStore, pub Publisher, batch int, clock func() time.Time, m *Metrics) *Relay {
	return &Relay{store: store, pub: pub, batch: batch, clock: clock, m: m}
}

// Drain runs one pass: it publishes unpublished rows until a read finds
// none, and returns how many it published. When ctx ends (the lease is
// lost) it stops publishing and returns ctx's error; batches already
// acknowledged are still marked.
func (r *Relay) Drain(ctx context.Context) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	g, gctx := errgroup.WithContext(pctx)
	read := make(chan []domain.Notification, 1)
	acked := make(chan []domain.Notification, 4)

	g.Go(func() error { // read ahead of the stored cursor
		defer close(read)
		after, err := r.store.PublishedUpTo(gctx)
		if err != nil {
			return err
		}
		for {
			notes, err := r.store.Unpublished(gctx, after, r.batch)
			if err != nil {
				return err
			}
			if len(notes) == 0 {
				return nil
			}
			after = notes[len(notes)-1].Sequence
			select {
			case read <- notes:
			case <-gctx.Done():
				return gctx.Err()
			}
		}
	})
	g.Go(func() error { // publish, one batch at a time
		defer close(acked)
		for notes := range read {
			if gctx.Err() != nil {
				return gctx.Err()
			}
			start := time.Now()
			if err := r.pub.Publish(gctx, notes); err != nil {
				return err
			}
			ackAt := r.clock()
			r.m.PublishBatch.Observe(time.Since(start).Seconds())
			for i := range notes {
				r.m.DueToPublish.Observe(ackAt.Sub(notes[i].DueAt).Seconds())
			}
			if r.AfterPublish != nil {
				if err := r.AfterPublish(gctx, notes); err != nil {
					return fmt.Errorf("after publish: %w", err)
				}
			}
			acked <- notes // never blocks for long: the marker drains acked whatever happens
		}
		return nil
	})
	var published int
	var markErr error
	g.Go(func() error { // mark, even after a failure elsewhere
		for notes := range acked {
			if markErr != nil {
				continue
			}
			// Batches acknowledged meanwhile share one cursor update.
			n, upTo := len(notes), notes[len(notes)-1].Sequence
		more:
			for {
				select {
				case next, ok := <-acked:
					if !ok {
						break more
					}
					n, upTo = n+len(next), next[len(next)-1].Sequence
				default:
					break more
				}
			}
			mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
			markErr = r.store.MarkPublished(mctx, upTo, r.clock())
			cancel()
			if markErr != nil {
				stop(markErr) // stop reading and publishing
				continue
			}
			published += n
			r.m.Published.Add(float64(n))
		}
		return markErr
	})
	err := g.Wait()
	switch {
	case markErr != nil:
		err = markErr
	case ctx.Err() != nil:
		err = context.Cause(ctx)
	}
	if err != nil {
		r.m.RelayErrors.Inc()
		return published, fmt.Errorf("relay outbox: %w", err)
	}
	return published, nil
}
