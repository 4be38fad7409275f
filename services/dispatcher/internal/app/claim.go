package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/notiflow/notiflow/lib/consume"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
	"github.com/notiflow/notiflow/services/dispatcher/internal/domain"
)

// exitSend ends the registration of token's send in progress of ref's
// target, with a short deadline of its own: a registration that cannot be
// removed expires with the in-flight TTL.
func (d *Dispatcher) exitSend(ctx context.Context, ref domain.FenceRef, token string) {
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := d.fence.ExitSend(ectx, ref.TargetID, token); err != nil {
		d.depFailed("redis", "end send", err)
	}
}

// cancelled is the outcome of a record its target's fence stopped, after
// attempts provider calls.
func cancelled(attempts uint32, body string) domain.Outcome {
	return domain.Outcome{Status: notiflowv1.Status_STATUS_CANCELLED, Attempts: attempts, Err: domain.ErrFenced.Error(), Body: body}
}

func failure(reason string) domain.Outcome {
	return domain.Outcome{Status: notiflowv1.Status_STATUS_FAILED, Err: reason, DeadLetter: true}
}

// renderFailed is the outcome of due, whose template could not be
// rendered (reason, final): CANCELLED like at the claim when its target's
// fence stands above it (its target was changed or deleted, and a deleted
// target's managed template may be gone too), else FAILED with a dead
// letter. The fence is only read, nothing is claimed or registered; an
// incomplete copy of the fences or Redis failing is waited out (fences
// fail closed). It returns an error only when ctx ends.
func (d *Dispatcher) renderFailed(ctx context.Context, due *notiflowv1.NotificationDue, reason error) (domain.Outcome, error) {
	if d.fence == nil {
		return failure(reason.Error()), nil
	}
	ref := domain.FenceRef{TargetID: due.TargetId, Version: due.TargetVersion}
	var fenced bool
	err := d.retry(ctx, "redis", "check fence", func(ctx context.Context) (err error) {
		fenced, err = d.fence.Fenced(ctx, ref)
		return err
	})
	switch {
	case err != nil:
		return domain.Outcome{}, err
	case fenced:
		d.m.Fenced.Inc()
		return cancelled(0, ""), nil
	}
	return failure(reason.Error()), nil
}

// claim claims due, waiting while Redis is unavailable, while another
// worker holds the notification (until that claim is done or expires) and,
// when the claim is Deferred, until the recipient's next rate window opens
// (then it claims again). It returns how long it waited on the rate limit,
// and an error when ctx ends, when the drain begins during a rate-limit wait
// (wrapping consume.ErrDraining: the wait holds no claim, so the record
// gives way and is redelivered) or when the marker is unreadable.
func (d *Dispatcher) claim(ctx context.Context, due *notiflowv1.NotificationDue, token string) (domain.Claim, time.Duration, error) {
	depTry, busyTry := 0, 0
	var deferredAt time.Time // when the rate limit first deferred the record
	deferred := func() time.Duration {
		if deferredAt.IsZero() {
			return 0
		}
		waited := d.opt.Now().Sub(deferredAt)
		d.m.RateDeferWaiting.Dec()
		d.m.RateDeferWait.Observe(waited.Seconds())
		return waited
	}
	for {
		now := d.opt.Now()
		c, err := d.dedup.ClaimFenced(ctx, due.NotificationId, due.RecipientId, token,
			domain.FenceRef{TargetID: due.TargetId, Version: due.TargetVersion}, due.Channel == notiflowv1.Channel_CHANNEL_WEBHOOK, now)
		var wait time.Duration
		var draining <-chan struct{} // ends the wait when the drain begins
		switch {
		case err == nil && c.State == domain.Deferred:
			if deferredAt.IsZero() {
				deferredAt = now
				d.m.RateDeferred.Inc()
				d.m.RateDeferWaiting.Inc()
			}
			wait = max(c.RetryAt.Sub(now), time.Millisecond)
			draining = consume.Draining(ctx)
		case err == nil && c.State == domain.Unsynced:
			// Fences fail closed: nothing is sent until the scheduler
			// has copied every fence to Redis again.
			depTry++
			d.depFailed("redis", "claim", errors.New("the copy of the target fences in redis is incomplete (marker missing); waiting for the scheduler to restore it"))
			wait = consume.Backoff(depTry, d.opt.DepBackoffMin, d.opt.DepBackoffMax)
		case err == nil && c.State != domain.Busy:
			return c, deferred(), nil
		case err == nil:
			if busyTry == 0 {
				d.m.InflightWaits.Inc()
			}
			busyTry++
			wait = consume.Backoff(busyTry, d.opt.BusyBackoffMin, d.opt.BusyBackoffMax)
		case errors.Is(err, domain.ErrBadMarker):
			return domain.Claim{}, deferred(), err
		case ctx.Err() != nil:
			return domain.Claim{}, deferred(), fmt.Errorf("claim %s: %w", due.NotificationId, ctx.Err())
		default:
			depTry++
			d.depFailed("redis", "claim", err)
			wait = consume.Backoff(depTry, d.opt.DepBackoffMin, d.opt.DepBackoffMax)
		}
		if err := sleep(ctx, wait, draining); err != nil {
			return domain.Claim{}, deferred(), fmt.Errorf("claim %s: %w", due.NotificationId, err)
		}
	}
}
