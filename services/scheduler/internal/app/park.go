package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// ErrUnpublishable marks a notification that no retry can publish as it
// is: it cannot be encoded, or its record is larger than the producer or
// the broker accepts.
var ErrUnpublishable = errors.New("unpublishable notification")

// PublishErrors is the error a Publisher returns when it knows the outcome
// of each notification of a call: entry i is nil when notes[i] was
// acknowledged. An entry wrapping ErrUnpublishable says that notes[i] was
// refused for good, alone or with the rest of a produce batch the broker
// refused as a whole (Kafka judges a batch, not a record); any other
// entry is a failure a retry may cure.
type PublishErrors []error

func (e PublishErrors) Error() string {
	n, first := 0, error(nil)
	for _, err := range e {
		if err != nil {
			if n++; first == nil {
				first = err
			}
		}
	}
	return fmt.Sprintf("%d of %d notifications failed, first: %v", n, len(e), first)
}

// Unwrap returns the entries, so that errors.Is finds ErrUnpublishable.
func (e PublishErrors) Unwrap() []error { return e }

// Parked is an outbox row the relay gave up on: its notification, why,
// and when.
type Parked struct {
	Note   domain.Notification
	Reason string
	At     time.Time
}

// publish publishes notes and returns how many of them it parked. When the
// publisher refuses some for good (see PublishErrors) it goes through the
// notes that were not acknowledged in order: each refused one is published
// again alone and parked when refused alone, and the runs of others
// between them are published again together (recursively, the same way).
// So a row no retry can publish never stops the rows after it, and a
// partition's records still go out in order. Parked rows are recorded
// before publish returns. Any other failure is returned and nothing is
// parked: the pass fails and the rows are retried.
func (r *Relay) publish(ctx context.Context, notes []domain.Notification) (int, error) {
	err := r.pub.Publish(ctx, notes)
	var perrs PublishErrors
	if err == nil || !errors.As(err, &perrs) || len(perrs) != len(notes) || !errors.Is(perrs, ErrUnpublishable) {
		return 0, err
	}
	var (
		parked  []Parked
		nParked int
		run     []domain.Notification // not acknowledged, not refused for good
	)
	flush := func() error {
		if len(run) == 0 {
			return nil
		}
		n, err := r.publish(ctx, run)
		nParked += n
		run = nil
		return err
	}
	for i, e := range perrs {
		switch {
		case e == nil:
			continue
		case !errors.Is(e, ErrUnpublishable):
			run = append(run, notes[i])
			continue
		}
		if err := flush(); err != nil {
			return 0, err
		}
		err := r.pub.Publish(ctx, notes[i:i+1])
		switch {
		case err == nil:
		case errors.Is(err, ErrUnpublishable):
			parked = append(parked, Parked{Note: notes[i], Reason: err.Error(), At: r.clock()})
		default:
			return 0, err
		}
	}
	if err := flush(); err != nil {
		return 0, err
	}
	if err := r.store.Park(ctx, parked); err != nil {
		return 0, err
	}
	for _, p := range parked {
		r.log.Error("outbox row parked: it can never be published as it is; the relay goes on past it",
			"outbox_id", p.Note.Sequence, "notification_id", p.Note.ID, "target_id", p.Note.TargetID, "reason", p.Reason)
	}
	r.m.Parked.Add(float64(len(parked)))
	return nParked + len(parked), nil
}
