package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/consume"
	notiflowv1 "github.com/notiflow/notiflow/proto/notiflow/v1"
	"github.com/notiflow/notiflow/services/dispatcher/internal/domain"
)

// Deduper claims notifications for sending and remembers outcomes
// (implemented by adapters.Store over Redis).
type Deduper interface {
	// ClaimFenced tries to take notification id for sending under token
	// and checks the target's fence (f) and the recipient's rate limit in
	// the same atomic step: a fenced record answers Fenced, an incomplete
	// copy of the fences Unsynced (nothing written for either); over the
	// limit it answers RateLimited (remembered as such) or Deferred
	// (nothing written), as its rate-limit policy says. A Claimed
	// notification is registered as a send in progress of its target.
	// signing says the record is a webhook, whose target's signing record
	// the claim may read too, for the send that follows.
	ClaimFenced(ctx context.Context, id, recipient, token string, f domain.FenceRef, signing bool, now time.Time) (domain.Claim, error)
	// StartMarkDone starts remembering a finished dispatch; the returned
	// function waits until it is stored.
	StartMarkDone(ctx context.Context, id string, o domain.Outcome) (wait func(context.Context) error)
	// Release drops token's claim so the next delivery is judged afresh.
	Release(ctx context.Context, id, token string) error
}

// SendFence re-checks a target's fence during a send and ends the send's
// registration (implemented by adapters.Store over Redis, format
// lib/fence).
type SendFence interface {
	// Recheck checks f's fence for the send under token and renews its
	// registration: nil, an error wrapping domain.ErrFenced, or another
	// error when the fence cannot be judged.
	Recheck(ctx context.Context, f domain.FenceRef, token string) error
	// Fenced reports whether f's record is below its target's fence,
	// without claiming or registering anything; an error when the fence
	// cannot be judged.
	Fenced(ctx context.Context, f domain.FenceRef) (bool, error)
	// ExitSend ends token's registration as a send in progress of target.
	ExitSend(ctx context.Context, targetID uint64, token string) error
	// RenewSends extends the registrations of sends in progress (token ->
	// target id) for another in-flight TTL.
	RenewSends(ctx context.Context, sends map[string]uint64) error
	// StartMarkDoneExit is Deduper.StartMarkDone that also ends token's
	// registration as a send in progress of target, in the same round
	// trip.
	StartMarkDoneExit(ctx context.Context, id string, o domain.Outcome, targetID uint64, token string) (wait func(context.Context) error)
}

// ClaimExtender renews claims (notification id -> token) while long sends
// run, and says how many were no longer held.
type ClaimExtender interface {
	ExtendMany(ctx context.Context, claims map[string]string) (lost int, err error)
}

// Sender delivers a rendered notification through one channel. It returns
// an error only when ctx ended before there was an outcome.
type Sender interface {
	Send(ctx context.Context, due *notiflowv1.NotificationDue, body string) (domain.Outcome, error)
}

// Renderer renders a template with JSON params and returns the text and
// the version of the template it was rendered with (recorded with each
// result). Errors wrapping domain.ErrUnknownTemplate or domain.ErrRender
// are final; others are a dependency failing, and are retried.
type Renderer interface {
	Render(ctx context.Context, id string, params []byte) (body, version string, err error)
}

// Publisher publishes a result and returns once it is durable.
type Publisher interface {
	Publish(ctx context.Context, res *notiflowv1.NotificationDispatched) error
}

// DeadLetterer sends an original record to the dead-letter topic
// (kafkax.DeadLetter).
type DeadLetterer interface {
	Send(ctx context.Context, msg kafka.Message, reason error, attempts int) error
}

// Options tune a Dispatcher; zero values take the defaults, except
// InflightTTL, which is required.
type Options struct {
	// InflightTTL is the claim TTL (NOTIFLOW_INFLIGHT_TTL, which the store
	// is given too); a running send renews its claim every third of it.
	InflightTTL time.Duration
	// DepBackoffMin/Max shape the waits while Redis or Kafka fail.
	DepBackoffMin, DepBackoffMax time.Duration
	// BusyBackoffMin/Max shape the waits on another worker's claim.
	BusyBackoffMin, BusyBackoffMax time.Duration
	// Now is the clock (tests); time.Now by default.
	Now func() time.Time
}

func (o *Options) setDefaults() {
	if o.DepBackoffMin <= 0 {
		o.DepBackoffMin = 50 * time.Millisecond
	}
	if o.DepBackoffMax <= 0 {
		o.DepBackoffMax = 2 * time.Second
	}
	if o.BusyBackoffMin <= 0 {
		o.BusyBackoffMin = 50 * time.Millisecond
	}
	if o.BusyBackoffMax <= 0 {
		o.BusyBackoffMax = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Dispatcher handles due notifications, one record at a time per call; it
// is safe for concurrent use by the consumer's workers.
type Dispatcher struct {
	dedup   Deduper
	fence   SendFence
	extend  ClaimExtender
	render  Renderer
	senders map[notiflowv1.Channel]Sender
	pub     Publisher
	dlq     DeadLetterer
	m       *Metrics
	log     *slog.Logger
	opt     Options

	tokenPrefix string
	seq         atomic.Uint64
	lastWarn    sync.Map // dependency -> *atomic.Int64 (unix nanos of the last warning)

	// held are the claims of running sends (token -> claim), renewed by
	// Run so that a long send keeps its claim.
	heldMu sync.Mutex
	held   map[string]heldClaim
}

type heldClaim struct {
	id     string
	target uint64
	since  time.Time
}

// New returns a Dispatcher. senders maps each supported channel to its
// provider; records of other channels fail with a dead letter. dedup must
// also be a SendFence when it implements one (adapters.Store does); the
// fence is then re-checked before each webhook retry.
func New(dedup Deduper, extend ClaimExtender, render Renderer, senders map[notiflowv1.Channel]Sender,
	pub Publisher, dlq DeadLetterer, m *Metrics, log *slog.Logger, opt Options) *Dispatcher {
	opt.setDefaults()
	var b [8]byte
	_, _ = rand.Read(b[:])
	if m == nil {
		m = NewMetrics(nil)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	fence, _ := dedup.(SendFence)
	return &Dispatcher{
		dedup: dedup, fence: fence, extend: extend, render: render, senders: senders, pub: pub, dlq: dlq, m: m, log: log, opt: opt,
		tokenPrefix: hex.EncodeToString(b[:]) + "-",
		held:        map[string]heldClaim{},
	}
}

// Run renews the claims of sends that run longer than a sixth of the
// in-flight TTL, and their registrations as sends in progress of their
// targets, every third of it, in one batched call each, until ctx ends.
// Stop it after the consumer. It returns nil.
func (d *Dispatcher) Run(ctx context.Context) error {
	interval := d.opt.InflightTTL / 3
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		now := d.opt.Now()
		claims := map[string]string{}
		sends := map[string]uint64{}
		d.heldMu.Lock()
		for token, c := range d.held {
			if now.Sub(c.since) >= d.opt.InflightTTL/6 {
				claims[c.id] = token
				sends[token] = c.target
			}
		}
		d.heldMu.Unlock()
		if len(claims) == 0 {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, interval)
		lost, err := d.extend.ExtendMany(rctx, claims)
		if d.fence != nil {
			// The sends' registrations live as long as their claims, so a
			// change of their targets waits for them (see SendFence).
			if err := d.fence.RenewSends(rctx, sends); err != nil {
				d.depFailed("redis", "renew sends", err)
			}
		}
		cancel()
		switch {
		case err != nil:
			d.depFailed("redis", "extend claims", err)
		case lost > 0:
			d.log.Warn("in-flight claims lost during sends; another worker may send those notifications too", "lost", lost)
		}
	}
}

func (d *Dispatcher) hold(id string, target uint64, token string) {
	d.heldMu.Lock()
	d.held[token] = heldClaim{id: id, target: target, since: d.opt.Now()}
	d.heldMu.Unlock()
}

func (d *Dispatcher) unhold(token string) {
	d.heldMu.Lock()
	delete(d.held, token)
	d.heldMu.Unlock()
}

// Handle dispatches one due notification and returns once its result is
// acknowledged by Kafka (and, when it failed for good, its dead letter):
//
//  1. render the template (built-in, file or managed; an unknown template
//     or a render failure: FAILED result plus dead letter, or CANCELLED
//     when the target's fence, then read, is above the record, as after
//     a delete that took its managed template along; the managed
//     templates' store failing is waited out);
//  2. claim the notification in Redis, checking the target's fence and the
//     recipient's rate limit in the same script: already done gives a
//     DUPLICATE result, a record below its target's fence a CANCELLED
//     result (nothing sent), an incomplete copy of the fences is waited
//     out like a Redis failure, another worker's claim is waited out;
//     over the limit, policy drop gives a
//     RATE_LIMITED result and policy defer waits for the recipient's next
//     window and claims again (holding no claim while it waits);
//  3. send it through its channel (Run renews the claim of a long send),
//     registered as a send in progress of its target until the provider
//     returns; a webhook checks the fence again before each retry
//     (CANCELLED when it rose);
//  4. release the claim of a failure so that a replay from the dead-letter
//     topic is sent again, and dead-letter the record;
//  5. publish the result, while (for DELIVERED) the done marker is written;
//     both must be stored before Handle returns.
//
// Redis and Kafka failures are waited out with backoff, never counted as
// attempts: Handle returns an error only when ctx ends or, while the
// record is deferred, when its generation's drain begins (consume.Draining;
// the error wraps consume.ErrDraining), and the record is then left
// uncommitted and redelivered (a deferred record is neither recorded
// RATE_LIMITED nor dead-lettered). A send in progress is not cut by the
// drain: it runs until it has an outcome or ctx ends.
func (d *Dispatcher) Handle(ctx context.Context, rec *consume.Record[*notiflowv1.NotificationDue]) error {
	due := rec.Value
	out, version, remembered, err := d.dispatch(ctx, due)
	if err != nil {
		return err
	}
	if out.DeadLetter {
		err := d.retry(ctx, "kafka", "dead letter", func(ctx context.Context) error {
			return d.dlq.Send(ctx, rec.Msg, errors.New(out.Err), int(out.Attempts))
		})
		if err != nil {
			return err
		}
	}
	now := d.opt.Now()
	res := &notiflowv1.NotificationDispatched{
		NotificationId: due.NotificationId, TargetId: due.TargetId, OccurrenceAtUs: due.OccurrenceAtUs,
		RecipientId: due.RecipientId, Sequence: due.Sequence, Channel: due.Channel, TemplateId: due.TemplateId,
		Status: out.Status, Attempts: out.Attempts, ProviderCode: out.ProviderCode, Error: out.Err,
		DueAtUs: due.DueAtUs, DispatchedAtUs: now.UnixMicro(), RunId: due.RunId, Body: out.Body,
		OriginalStatus: out.OriginalStatus, TemplateVersion: version,
	}
	if due.DueAtUs > 0 {
		res.LatencyUs = max(res.DispatchedAtUs-due.DueAtUs, 0)
	}
	if err := d.retry(ctx, "kafka", "publish result", func(ctx context.Context) error { return d.pub.Publish(ctx, res) }); err != nil {
		return err
	}
	d.m.stage[stagePublish].Observe(d.opt.Now().Sub(now).Seconds())
	if remembered != nil {
		if err := remembered(ctx); err != nil {
			return err
		}
	}
	d.m.Results.WithLabelValues(out.Status.Name(), due.Channel.Name()).Inc()
	if due.DueAtUs > 0 {
		d.m.Latency.Observe(float64(res.LatencyUs) / 1e6)
	}
	return nil
}

// dispatch renders due (step 1 of Handle, waiting out a template store
// that fails), runs steps 2-4 and returns the outcome to publish, the
// template version and, when the done marker is still being written, a
// function waiting for it (retrying until it is stored or ctx ends).
func (d *Dispatcher) dispatch(ctx context.Context, due *notiflowv1.NotificationDue) (domain.Outcome, string, func(context.Context) error, error) {
	var body, version string
	var renderErr error
	err := d.retry(ctx, "redis", "read template", func(ctx context.Context) error {
		body, version, renderErr = d.render.Render(ctx, due.TemplateId, due.ParamsJson)
		if renderErr != nil && !errors.Is(renderErr, domain.ErrUnknownTemplate) && !errors.Is(renderErr, domain.ErrRender) {
			return renderErr
		}
		return nil
	})
	if err != nil {
		return domain.Outcome{}, "", nil, err
	}
	if renderErr != nil {
		out, err := d.renderFailed(ctx, due, renderErr)
		return out, version, nil, err
	}
	out, remembered, err := d.send(ctx, due, body)
	return out, version, remembered, err
}

// send runs steps 2-4 of Handle for the rendered body.
func (d *Dispatcher) send(ctx context.Context, due *notiflowv1.NotificationDue, body string) (domain.Outcome, func(context.Context) error, error) {
	sender := d.senders[due.Channel]
	if sender == nil {
		o := failure(fmt.Sprintf("channel %s is not supported by this dispatcher", due.Channel))
		o.Body = body
		return o, nil, nil
	}
	token := d.tokenPrefix + strconv.FormatUint(d.seq.Add(1), 36)
	t0 := d.opt.Now()
	claim, deferred, err := d.claim(ctx, due, token)
	t1 := d.opt.Now()
	d.m.stage[stageClaim].Observe((t1.Sub(t0) - deferred).Seconds())
	ref := domain.FenceRef{TargetID: due.TargetId, Version: due.TargetVersion}
	exited := false // the registration ended with the done marker
	if claim.State == domain.Claimed {
		d.hold(due.NotificationId, due.TargetId, token)
		defer d.unhold(token)
		if d.fence != nil {
			// The provider call has returned (or never started) when
			// dispatch returns: the send is no longer in progress.
			defer func() {
				if !exited {
					d.exitSend(ctx, ref, token)
				}
			}()
			ctx = domain.WithSendGate(ctx, domain.SendGate{
				Check: func(ctx context.Context) error { return d.fence.Recheck(ctx, ref, token) },
				Leave: func(ctx context.Context) { d.exitSend(ctx, ref, token) },
			})
		}
	}
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, consume.ErrDraining) {
			return domain.Outcome{}, nil, err
		}
		o := failure(err.Error())
		o.Body = body
		return o, nil, nil
	}
	switch claim.State {
	case domain.Duplicate:
		d.m.Duplicates.Inc()
		return domain.Outcome{
			Status: notiflowv1.Status_STATUS_DUPLICATE, OriginalStatus: claim.Previous.Status,
			Attempts: claim.Previous.Attempts, ProviderCode: claim.Previous.ProviderCode, Body: body,
		}, nil, nil
	case domain.RateLimited:
		d.m.RateLimited.Inc()
		return domain.Outcome{Status: notiflowv1.Status_STATUS_RATE_LIMITED, Err: "recipient over its rate limit", Body: body}, nil, nil
	case domain.Fenced:
		d.m.Fenced.Inc()
		return cancelled(0, body), nil, nil
	}

	out, err := sender.Send(ctx, due, body)
	t2 := d.opt.Now()
	d.m.stage[stageSend].Observe(t2.Sub(t1).Seconds())
	if err != nil {
		// ctx ended before an outcome: give the claim back so that the
		// redelivered record does not have to wait for it to expire.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = d.dedup.Release(rctx, due.NotificationId, token)
		cancel()
		return domain.Outcome{}, nil, err
	}
	out.Body = body
	id := due.NotificationId
	if out.Status == notiflowv1.Status_STATUS_CANCELLED {
		d.m.Fenced.Inc()
	}
	if out.Status == notiflowv1.Status_STATUS_DELIVERED {
		// The done marker is written while the result is published;
		// Handle waits for both before it returns.
		var wait func(context.Context) error
		if d.fence != nil {
			wait, exited = d.fence.StartMarkDoneExit(ctx, id, out, ref.TargetID, token), true
		} else {
			wait = d.dedup.StartMarkDone(ctx, id, out)
		}
		return out, func(ctx context.Context) error {
			err := wait(ctx)
			if err != nil && ctx.Err() == nil {
				err = d.retry(ctx, "redis", "mark done", func(ctx context.Context) error {
					return d.dedup.StartMarkDone(ctx, id, out)(ctx)
				})
			}
			d.m.stage[stageRemember].Observe(d.opt.Now().Sub(t2).Seconds())
			return err
		}, nil
	}
	err = d.retry(ctx, "redis", "release claim", func(ctx context.Context) error { return d.dedup.Release(ctx, id, token) })
	d.m.stage[stageRemember].Observe(d.opt.Now().Sub(t2).Seconds())
	return out, nil, err
}

// retry calls fn until it succeeds or ctx ends, waiting with backoff.
func (d *Dispatcher) retry(ctx context.Context, dep, op string, fn func(context.Context) error) error {
	for try := 1; ; try++ {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w", op, ctx.Err())
		}
		d.depFailed(dep, op, err)
		if serr := sleep(ctx, consume.Backoff(try, d.opt.DepBackoffMin, d.opt.DepBackoffMax), nil); serr != nil {
			return fmt.Errorf("%s: %w (last error: %v)", op, serr, err)
		}
	}
}

// depFailed counts a dependency failure and logs at most one warning per
// dependency every 5 seconds.
func (d *Dispatcher) depFailed(dep, op string, err error) {
	d.m.DepErrors.WithLabelValues(dep, op).Inc()
	v, _ := d.lastWarn.LoadOrStore(dep, new(atomic.Int64))
	last := v.(*atomic.Int64)
	now := time.Now().UnixNano()
	if prev := last.Load(); now-prev > int64(5*time.Second) && last.CompareAndSwap(prev, now) {
		d.log.Warn("dependency failing; records wait and retry", "dependency", dep, "op", op, "err", err)
	}
}

// sleep waits d; it returns ctx's error when ctx ends first, and
// consume.ErrDraining when draining (nil: never) is closed first.
func sleep(ctx context.Context, d time.Duration, draining <-chan struct{}) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-draining:
		return consume.ErrDraining
	case <-t.C:
		return nil
	}
}
