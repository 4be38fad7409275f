package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// OutboxStore is the outbox as the relay sees it: rows in id order, the
// highest committed id, a cursor below which every row was published or
// parked, and the parked rows.
type OutboxStore interface {
	// PublishedUpTo returns the cursor.
	PublishedUpTo(ctx context.Context) (uint64, error)
	// CommittedUpTo returns an id up to which every row that will ever
	// exist is committed and visible to reads begun after it returns.
	CommittedUpTo(ctx context.Context) (uint64, error)
	// Unpublished returns up to limit rows with afterID < id <= upTo in
	// id order; Sequence is the row id.
	Unpublished(ctx context.Context, afterID, upTo uint64, limit int) ([]domain.Notification, error)
	// RowIDs returns the ids of the rows with afterID < id <= upTo, in
	// order, from a fresh read.
	RowIDs(ctx context.Context, afterID, upTo uint64) ([]uint64, error)
	// MarkPublished moves the cursor forward to upTo.
	MarkPublished(ctx context.Context, upTo uint64, at time.Time) error
	// Park records rows the relay gives up on (see Relay).
	Park(ctx context.Context, parked []Parked) error
}

// Publisher publishes notifications in order and returns once all are
// acknowledged. A publish that fails never lands a record of a key before
// every earlier record of that key was acknowledged, so re-publishing from
// the cursor keeps each key's first appearances in order. When it knows the
// outcome of each notification of a failed call it returns a PublishErrors
// (wrapped or not).
type Publisher interface {
	Publish(ctx context.Context, notes []domain.Notification) error
}

// markTimeout bounds one MarkPublished call. Marking runs even after the
// pass failed or the lease ended: rows already acknowledged by Kafka are
// best marked, to spare downstream a duplicate.
const markTimeout = 10 * time.Second

// Relay publishes the outbox to Kafka. A pass reads the rows after the
// stored cursor in id order, never above the highest committed id
// (CommittedUpTo), publishes each batch (Publisher.Publish), and after
// the acknowledgement moves the cursor past the batch (one small UPDATE
// per batch rather than one per row); reading the next batch, publishing
// and marking overlap (a three-stage pipeline), but batches are published
// one after the other, so per-key order follows outbox order. A crash
// between publish and mark leaves the cursor behind: the next pass
// publishes those rows again with the same notification ids.
//
// Before the cursor crosses a gap in the ids a pass published (ids are not
// contiguous: a rolled back claim or a skipped duplicate consumes values),
// a fresh read checks that no row exists in the gap. One that does was
// hidden from the pass's read: the cursor stops below it, the pass ends
// and the next one publishes it (and the rows after it again); this is
// counted (notiflow_scheduler_relay_hidden_rows_total) and logged. The
// guard trades a loss for a possible reorder: the hidden row reaches Kafka
// after rows above it that the pass had published. Reads bounded by
// CommittedUpTo make it unreachable by construction; it stays as a check
// of that construction.
//
// A row the publisher refuses for good (ErrUnpublishable: too large, not
// encodable) is parked: recorded with its reason (OutboxStore.Park),
// counted (notiflow_scheduler_outbox_parked_total) and logged, and the
// cursor moves past it, so that the rows after it flow.
type Relay struct {
	store OutboxStore
	pub   Publisher
	batch int
	clock func() time.Time
	m     *Metrics
	log   *slog.Logger

	mu sync.Mutex

	// AfterPublish, when set, runs after each acknowledged batch and
	// before it is marked; an error ends the pass without marking that
	// batch. It is a fault-injection point for tests; nil in production.
	AfterPublish func(ctx context.Context, notes []domain.Notification) error
}

// NewRelay returns a relay reading batch rows at a time.
func NewRelay(store OutboxStore, pub Publisher, batch int, clock func() time.Time, m *Metrics, log *slog.Logger) *Relay {
	return &Relay{store: store, pub: pub, batch: batch, clock: clock, m: m, log: log}
}

// acked is a published batch on its way to the marker.
type acked struct {
	notes  []domain.Notification
	parked int // of notes, those parked rather than published
}

// Drain runs one pass: it publishes unpublished rows until it reaches the
// highest committed id and that id no longer grows, and returns how many
// it published. When ctx ends (the lease is lost) it stops publishing and
// returns ctx's error; batches already acknowledged are still marked.
func (r *Relay) Drain(ctx context.Context) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	from, err := r.store.PublishedUpTo(ctx)
	if err != nil {
		r.m.RelayErrors.Inc()
		return 0, fmt.Errorf("relay outbox: %w", err)
	}
	pctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	g, gctx := errgroup.WithContext(pctx)
	read := make(chan []domain.Notification, 1)
	ackedc := make(chan acked, 4)

	g.Go(func() error { // read ahead of the stored cursor, up to the committed end
		defer close(read)
		after, end := from, from
		for {
			if after >= end {
				hi, err := r.store.CommittedUpTo(gctx)
				if err != nil {
					return err
				}
				if hi <= after {
					return nil
				}
				end = hi
			}
			notes, err := r.store.Unpublished(gctx, after, end, r.batch)
			if err != nil {
				return err
			}
			if len(notes) < r.batch {
				after = end // every row up to end was read
			} else {
				after = notes[len(notes)-1].Sequence
			}
			if len(notes) == 0 {
				continue
			}
			select {
			case read <- notes:
			case <-gctx.Done():
				return gctx.Err()
			}
		}
	})
	g.Go(func() error { // publish, one batch at a time
		defer close(ackedc)
		for notes := range read {
			if gctx.Err() != nil {
				return gctx.Err()
			}
			start := time.Now()
			parked, err := r.publish(gctx, notes)
			if err != nil {
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
			ackedc <- acked{notes: notes, parked: parked} // never blocks for long: the marker drains it whatever happens
		}
		return nil
	})
	var published int
	var markErr error
	hidden := false
	g.Go(func() error { // mark, even after a failure elsewhere
		prev := from // the cursor as this pass last moved it
		for b := range ackedc {
			if markErr != nil || hidden {
				continue
			}
			// Batches acknowledged meanwhile share one cursor update.
			batches := []acked{b}
		more:
			for {
				select {
				case next, ok := <-ackedc:
					if !ok {
						break more
					}
					batches = append(batches, next)
				default:
					break more
				}
			}
			mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
			var upTo uint64
			upTo, markErr = r.checkGaps(mctx, prev, batches)
			if markErr == nil && upTo > prev {
				markErr = r.store.MarkPublished(mctx, upTo, r.clock())
			}
			cancel()
			if markErr != nil {
				stop(markErr) // stop reading and publishing
				continue
			}
			for _, b := range batches {
				// Only the rows the cursor passed count; the rest are
				// published again by the next pass.
				n := len(b.notes) - b.parked
				if last := b.notes[len(b.notes)-1].Sequence; last > upTo {
					n = 0
					for _, note := range b.notes {
						if note.Sequence <= upTo {
							n++
						}
					}
				}
				published += n
				r.m.Published.Add(float64(n))
			}
			if last := batches[len(batches)-1].notes; upTo < last[len(last)-1].Sequence {
				hidden = true
				stop(errHiddenRow) // the next pass publishes from the cursor
			}
			prev = upTo
		}
		return markErr
	})
	err = g.Wait()
	switch {
	case markErr != nil:
		err = markErr
	case ctx.Err() != nil:
		err = context.Cause(ctx)
	case hidden && errors.Is(err, context.Canceled):
		err = nil
	}
	if err != nil {
		r.m.RelayErrors.Inc()
		return published, fmt.Errorf("relay outbox: %w", err)
	}
	return published, nil
}

// errHiddenRow ends a pass that found a row its read had missed.
var errHiddenRow = errors.New("an outbox row was hidden from the read")

// checkGaps returns how far the cursor may move, from prev, past the
// acknowledged batches: to their last id, unless a fresh read finds a row
// in a gap between the ids they carry (the first id after prev included),
// which the pass did not publish; then to just below the first such row.
func (r *Relay) checkGaps(ctx context.Context, prev uint64, batches []acked) (uint64, error) {
	last := batches[len(batches)-1].notes
	upTo := last[len(last)-1].Sequence
	n := 0
	for _, b := range batches {
		n += len(b.notes)
	}
	if upTo-prev == uint64(n) {
		return upTo, nil // contiguous: no gap to cross
	}
	ids, err := r.store.RowIDs(ctx, prev, upTo)
	if err != nil {
		return 0, fmt.Errorf("check the outbox for rows the pass missed: %w", err)
	}
	i := 0 // ids[i] is the lowest row not matched with a published note yet
	for _, b := range batches {
		for _, note := range b.notes {
			if i < len(ids) && ids[i] < note.Sequence {
				r.m.HiddenRows.Inc()
				r.log.Error("relay: the pass's read missed an outbox row below rows it published; the cursor stops below it and the next pass publishes it",
					"outbox_id", ids[i], "published", note.Sequence)
				return ids[i] - 1, nil
			}
			if i < len(ids) && ids[i] == note.Sequence {
				i++
			}
		}
	}
	return upTo, nil
}
