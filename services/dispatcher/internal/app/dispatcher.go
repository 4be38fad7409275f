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
	// Claim tries to take notification id for sending under token and
	// checks the recipient's rate limit in the same atomic step.
	Claim(ctx context.Context, id, recipient, token string, now time.Time) (domain.Claim, error)
	// MarkDone remembers a finished dispatch.
	MarkDone(ctx context.Context, id string, o domain.Outcome) error
	// Release drops token's claim so the next delivery is judged afresh.
	Release(ctx context.Context, id, token string) error
}

// ClaimExtender renews a claim while a long send runs.
type ClaimExtender interface {
	Extend(ctx context.Context, id, token string) error
}

// Sender delivers a rendered notification through one channel. It returns
// an error only when ctx ended before there was an outcome.
type Sender interface {
	Send(ctx context.Context, due *notiflowv1.NotificationDue, body string) (domain.Outcome, error)
}

// Renderer renders a template with JSON params.
type Renderer interface {
	Render(id string, params []byte) (string, error)
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

// Options tune a Dispatcher; zero values take the defaults.
type Options struct {
	// InflightTTL is the claim TTL; a running send renews its claim every
	// third of it.
	InflightTTL time.Duration
	// DepBackoffMin/Max shape the waits while Redis or Kafka fail.
	DepBackoffMin, DepBackoffMax time.Duration
	// BusyBackoffMin/Max shape the waits on another worker's claim.
	BusyBackoffMin, BusyBackoffMax time.Duration
	// Now is the clock (tests); time.Now by default.
	Now func() time.Time
}

func (o *Options) setDefaults() {
	if o.InflightTTL <= 0 {
		o.InflightTTL = 15 * time.Second
	}
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
}

// New returns a Dispatcher. senders maps each supported channel to its
// provider; records of other channels fail with a dead letter.
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
	return &Dispatcher{
		dedup: dedup, extend: extend, render: render, senders: senders, pub: pub, dlq: dlq, m: m, log: log, opt: opt,
		tokenPrefix: hex.EncodeToString(b[:]) + "-",
	}
}

// Handle dispatches one due notification and returns once its result is
// acknowledged by Kafka (and, when it failed for good, its dead letter):
//
//  1. render the template (a failure: FAILED result plus dead letter);
//  2. claim the notification in Redis, checking the recipient's rate limit
//     in the same script: already done gives a DUPLICATE result, over the
//     limit a RATE_LIMITED one, another worker's claim is waited out;
//  3. send it through its channel, renewing the claim meanwhile;
//  4. remember DELIVERED as done, or release the claim of a failure so that
//     a replay from the dead-letter topic is sent again;
//  5. dead-letter a failure, then publish the result.
//
// Redis and Kafka failures are waited out with backoff, never counted as
// attempts: Handle returns an error only when ctx ends, and the record is
// then left uncommitted and redelivered.
func (d *Dispatcher) Handle(ctx context.Context, rec *consume.Record[*notiflowv1.NotificationDue]) error {
	due := rec.Value
	out, err := d.dispatch(ctx, due)
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
		OriginalStatus: out.OriginalStatus,
	}
	if due.DueAtUs > 0 {
		res.LatencyUs = max(res.DispatchedAtUs-due.DueAtUs, 0)
	}
	if err := d.retry(ctx, "kafka", "publish result", func(ctx context.Context) error { return d.pub.Publish(ctx, res) }); err != nil {
		return err
	}
	d.m.Results.WithLabelValues(domain.StatusName(out.Status), domain.ChannelName(due.Channel)).Inc()
	if due.DueAtUs > 0 {
		d.m.Latency.Observe(float64(res.LatencyUs) / 1e6)
	}
	return nil
}

// dispatch runs steps 1-4 of Handle and returns the outcome to publish.
func (d *Dispatcher) dispatch(ctx context.Context, due *notiflowv1.NotificationDue) (domain.Outcome, error) {
	body, err := d.render.Render(due.TemplateId, due.ParamsJson)
	if err != nil {
		return failure(err.Error()), nil
	}
	sender := d.senders[due.Channel]
	if sender == nil {
		o := failure(fmt.Sprintf("channel %s is not supported by this dispatcher", due.Channel))
		o.Body = body
		return o, nil
	}
	token := d.tokenPrefix + strconv.FormatUint(d.seq.Add(1), 36)
	claim, err := d.claim(ctx, due, token)
	if err != nil {
		if ctx.Err() != nil {
			return domain.Outcome{}, err
		}
		o := failure(err.Error())
		o.Body = body
		return o, nil
	}
	switch claim.State {
	case domain.Duplicate:
		d.m.Duplicates.Inc()
		return domain.Outcome{
			Status: notiflowv1.Status_STATUS_DUPLICATE, OriginalStatus: claim.Previous.Status,
			Attempts: claim.Previous.Attempts, ProviderCode: claim.Previous.ProviderCode, Body: body,
		}, nil
	case domain.RateLimited:
		d.m.RateLimited.Inc()
		return domain.Outcome{Status: notiflowv1.Status_STATUS_RATE_LIMITED, Err: "recipient over its rate limit", Body: body}, nil
	}

	stop := d.keepClaim(due.NotificationId, token)
	out, err := sender.Send(ctx, due, body)
	stop()
	if err != nil {
		// ctx ended before an outcome: give the claim back so that the
		// redelivered record does not have to wait for it to expire.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = d.dedup.Release(rctx, due.NotificationId, token)
		cancel()
		return domain.Outcome{}, err
	}
	out.Body = body
	id := due.NotificationId
	if out.Status == notiflowv1.Status_STATUS_DELIVERED {
		err = d.retry(ctx, "redis", "mark done", func(ctx context.Context) error { return d.dedup.MarkDone(ctx, id, out) })
	} else {
		err = d.retry(ctx, "redis", "release claim", func(ctx context.Context) error { return d.dedup.Release(ctx, id, token) })
	}
	return out, err
}

func failure(reason string) domain.Outcome {
	return domain.Outcome{Status: notiflowv1.Status_STATUS_FAILED, Err: reason, DeadLetter: true}
}

// claim claims due, waiting while Redis is unavailable and while another
// worker holds the notification (until that claim is done or expires). It
// returns an error when ctx ends or the marker is unreadable.
func (d *Dispatcher) claim(ctx context.Context, due *notiflowv1.NotificationDue, token string) (domain.Claim, error) {
	depTry, busyTry := 0, 0
	for {
		c, err := d.dedup.Claim(ctx, due.NotificationId, due.RecipientId, token, d.opt.Now())
		var wait time.Duration
		switch {
		case err == nil && c.State != domain.Busy:
			return c, nil
		case err == nil:
			if busyTry == 0 {
				d.m.InflightWaits.Inc()
			}
			busyTry++
			wait = consume.Backoff(busyTry, d.opt.BusyBackoffMin, d.opt.BusyBackoffMax)
		case errors.Is(err, domain.ErrBadMarker):
			return domain.Claim{}, err
		case ctx.Err() != nil:
			return domain.Claim{}, fmt.Errorf("claim %s: %w", due.NotificationId, ctx.Err())
		default:
			depTry++
			d.depFailed("redis", "claim", err)
			wait = consume.Backoff(depTry, d.opt.DepBackoffMin, d.opt.DepBackoffMax)
		}
		if !sleep(ctx, wait) {
			return domain.Claim{}, fmt.Errorf("claim %s: %w", due.NotificationId, ctx.Err())
		}
	}
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
		if !sleep(ctx, consume.Backoff(try, d.opt.DepBackoffMin, d.opt.DepBackoffMax)) {
			return fmt.Errorf("%s: %w (last error: %v)", op, ctx.Err(), err)
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

// keepClaim renews the claim every third of the in-flight TTL until the
// returned stop function is called, so that a long send (webhook retries)
// keeps its claim and a redelivered copy waits instead of sending too.
func (d *Dispatcher) keepClaim(id, token string) (stop func()) {
	interval := d.opt.InflightTTL / 3
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	var renew func()
	renew = func() {
		ctx, cancel := context.WithTimeout(context.Background(), interval)
		err := d.extend.Extend(ctx, id, token)
		cancel()
		if errors.Is(err, domain.ErrClaimLost) {
			d.log.Warn("in-flight claim lost during a send; another worker may send the notification too", "notification_id", id)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			t = time.AfterFunc(interval, renew)
		}
	}
	mu.Lock()
	t = time.AfterFunc(interval, renew)
	mu.Unlock()
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
	}
}

// sleep waits d or until ctx ends; it reports whether the full wait passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
