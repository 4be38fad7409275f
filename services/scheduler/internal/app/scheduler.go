package app

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// ClaimStore claims due targets into the outbox (see
// adapters.MySQLStore.ClaimDue).
type ClaimStore interface {
	// BeginClaim selects and advances up to limit due targets in a new
	// transaction and returns it open, or nil when nothing is due.
	BeginClaim(ctx context.Context, now time.Time, limit int, planner domain.Planner, from domain.ClaimCursor) (ClaimTx, error)
	// NextDue returns the due time of the due queue's first entry due
	// after the instant after; ok is false when there is none.
	NextDue(ctx context.Context, after time.Time) (at time.Time, ok bool, err error)
}

// ClaimTx is a claim transaction after its first step (targets selected
// FOR UPDATE SKIP LOCKED and advanced). Finish writes the outbox rows and
// commits; the outbox rows of claims finished one after the other get
// increasing ids. Finish or Rollback must be called exactly once.
type ClaimTx interface {
	// Targets is how much of the batch limit the claim used (a full
	// batch means more may be due).
	Targets() int
	Cursor() domain.ClaimCursor
	Finish(ctx context.Context) (domain.ClaimResult, error)
	Rollback()
}

// Housekeeper settles claimed one-shots, trims the outbox and measures its
// backlog.
type Housekeeper interface {
	// SettleOneShots stores "done" for one-shots claimed since the last
	// call, going through at most limit outbox rows; more says that rows
	// are left.
	SettleOneShots(ctx context.Context, limit int) (settled int64, more bool, err error)
	PurgePublished(ctx context.Context, before time.Time, limit int) (int64, error)
	Backlog(ctx context.Context) (int64, error)
}

// SchedulerOptions tune a Scheduler. Tick, ClaimBatch and ShutdownTimeout
// are required (positive): the service passes its configuration
// (NOTIFLOW_TICK, NOTIFLOW_CLAIM_BATCH, NOTIFLOW_SHUTDOWN_TIMEOUT), whose
// default tags are their defaults. The other zero values take the defaults
// noted.
type SchedulerOptions struct {
	Tick            time.Duration // between scans
	ClaimBatch      int           // targets per claim transaction
	Policy          domain.MissedPolicy
	Retention       time.Duration    // published outbox rows are kept this long
	ShutdownTimeout time.Duration    // bound of the drain after ctx ends
	Clock           func() time.Time // default time.Now
	NewID           func() string    // notification ids; default NewUUIDv7
	housekeepEvery  time.Duration
}

// Scheduler is the scan loop: a robfig/cron job ticks every Tick; a tick
// takes (or keeps) the scan lease, claims due targets batch after batch
// until none is due, and wakes the relay after each batch so that
// publishing overlaps claiming; when the next target falls due before the
// next tick, the tick waits for it and scans again at its due time. Only
// the lease holder claims and relays.
type Scheduler struct {
	leader  *Leader
	claims  ClaimStore
	relay   *Relay
	house   Housekeeper
	opts    SchedulerOptions
	planner domain.Planner
	log     *slog.Logger
	m       *Metrics

	wake chan struct{} // relay trigger, capacity 1: wake-ups coalesce

	houseMu   sync.Mutex
	lastHouse time.Time
	scanning  atomic.Bool // a tick is claiming: settling waits
}

// NewScheduler wires a Scheduler.
func NewScheduler(leader *Leader, claims ClaimStore, relay *Relay, house Housekeeper, opts SchedulerOptions, log *slog.Logger, m *Metrics) *Scheduler {
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.housekeepEvery <= 0 {
		opts.housekeepEvery = 5 * time.Second
	}
	return &Scheduler{
		leader: leader, claims: claims, relay: relay, house: house, opts: opts,
		planner: domain.Planner{Policy: opts.Policy},
		log:     log, m: m, wake: make(chan struct{}, 1),
	}
}

func (s *Scheduler) now() time.Time { return s.opts.Clock().UTC() }

// Run ticks until ctx ends, then shuts down in this order and returns nil:
//
//  1. Stop ticking: no new tick starts. A running tick sees ctx end after
//     its current claim batch, which it commits (batches run under the
//     lease's context, not ctx), and returns.
//  2. Stop the relay loop and run one last relay pass under the lease, so
//     that what the claims wrote is published now rather than by the next
//     holder.
//  3. Release the lock, so another replica takes over at its next tick
//     instead of after the lock's expiry.
//
// Steps 1 and 2 share the ShutdownTimeout; past it, what is left stays in
// the outbox for the next holder (nothing is lost).
func (s *Scheduler) Run(ctx context.Context) error {
	relayCtx, stopRelay := context.WithCancel(context.Background())
	relayDone := make(chan struct{})
	go func() {
		defer close(relayDone)
		s.relayLoop(relayCtx)
	}()

	logger := cronLogger{s.log}
	c := cron.New(cron.WithLocation(time.UTC), cron.WithLogger(logger),
		cron.WithChain(cron.Recover(logger), cron.SkipIfStillRunning(logger)))
	c.Schedule(every(s.opts.Tick), cron.FuncJob(func() { s.Tick(ctx) }))
	c.Start()
	<-ctx.Done()

	deadline := time.Now().Add(s.opts.ShutdownTimeout)
	dctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	s.log.Info("scheduler stopping: waiting for the running tick")
	select { // 1.
	case <-c.Stop().Done():
	case <-dctx.Done():
		s.log.Warn("scheduler stopping: the running tick outlived the shutdown timeout")
	}
	stopRelay() // 2.
	<-relayDone
	if lease, ok := s.leader.Current(); ok {
		fctx, fcancel := context.WithDeadline(lease, deadline)
		n, err := s.relay.Drain(fctx)
		fcancel()
		if err != nil {
			s.log.Warn("scheduler stopping: final relay pass incomplete; the next holder publishes the rest", "published", n, "err", err)
		} else {
			s.log.Info("scheduler stopping: outbox flushed", "published", n)
		}
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	s.leader.Release(rctx) // 3.
	return nil
}

// Tick scans if this replica holds (or can take) the lease. A scan claims
// batches until fewer than a full batch was due, a claim failed, ctx ended
// (the batches in progress, at most two, still commit) or the lease was
// lost (they roll back).
//
// After a complete scan Tick reads the due queue's first entry due after
// the scan's "now": when it falls due before the next tick could come
// (within Tick from now), Tick wakes the relay, waits for that instant
// under the lease and scans again, so a target is claimed at its due time
// rather than up to a tick after it. Scans of one Tick begin at least
// minScanGap apart, so due times spread over a second are claimed in a
// few batches rather than one scan each. Entries a scan skipped (another
// transaction locks them) are left to a later scan. Tick returns when
// nothing falls due within a tick, when the clock has not reached the
// awaited instant after the wait (a clock that does not follow real
// time), or when ctx or the lease ends; every claim it began has then
// committed or rolled back.
//
// Tick is what the cron job calls; tests call it directly. Calls must not
// overlap.
func (s *Scheduler) Tick(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	lease, ok := s.leader.Acquire(ctx)
	if !ok {
		return
	}
	defer s.Wake() // also when nothing was claimed: the relay retries leftovers and housekeeps
	for {
		now := s.now() // one "now" per scan: a cursor is only meaningful under it
		if !s.scan(ctx, lease, now) {
			return
		}
		next, ok := s.nextWake(lease, now)
		if !ok {
			return
		}
		s.Wake() // the relay's retries and housekeeping do not wait for the last scan
		if !s.sleepUntil(ctx, lease, next) {
			return
		}
	}
}

// minScanGap is the least time between the starts of two scans of one
// Tick: a target due within it of the previous scan's start waits for
// the next scan, at most this long.
const minScanGap = 50 * time.Millisecond

// scan claims the targets due at now, batch after batch, and reports
// whether it ran to its end: false after a failed claim or when ctx or the
// lease ended.
func (s *Scheduler) scan(ctx, lease context.Context, now time.Time) (complete bool) {
	s.scanning.Store(true)
	defer s.scanning.Store(false)
	start := time.Now()
	defer func() { s.m.ScanDuration.Observe(time.Since(start).Seconds()) }()

	// Two claims overlap: while the finisher writes the outbox rows of batch
	// k and commits, this loop selects and advances batch k+1 on another
	// connection (its SELECT skips the rows k still locks). Batches are
	// begun and finished in the same order, so outbox order follows
	// (next_run_at, id) order across batches.
	begun := make(chan ClaimTx) // unbuffered: at most two claims open
	failed := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var broken bool
		for c := range begun {
			if broken {
				c.Rollback() // its targets stay due for the next tick
				continue
			}
			if !s.finish(lease, c) {
				broken = true
				close(failed)
			}
		}
	}()
	defer func() {
		close(begun)
		<-done
		select {
		case <-failed: // the last batch's finish failed
			complete = false
		default:
		}
	}()
	var cursor domain.ClaimCursor
	for ctx.Err() == nil && lease.Err() == nil {
		select {
		case <-failed: // the scan stops at the first failure
			return false
		default:
		}
		c, err := s.claims.BeginClaim(lease, now, s.opts.ClaimBatch, s.planner, cursor)
		if err != nil {
			s.claimFailed(lease, err)
			return false
		}
		if c == nil {
			return true
		}
		full := c.Targets() >= s.opts.ClaimBatch
		cursor = c.Cursor()
		select {
		case begun <- c:
		case <-failed:
			c.Rollback()
			return false
		}
		if !full {
			return true
		}
	}
	return false
}

// nextWake returns when the scan after the one that began at scanNow
// should begin: at the due time of the queue's first entry due after
// scanNow, or minScanGap after scanNow if that is later; ok is false when
// that is a tick or more from now (the next tick comes first) or nothing
// is due after scanNow.
func (s *Scheduler) nextWake(lease context.Context, scanNow time.Time) (time.Time, bool) {
	at, ok, err := s.claims.NextDue(lease, scanNow)
	if err != nil {
		if lease.Err() == nil {
			s.log.Warn("read the next due time; the next tick scans", "err", err)
		}
		return time.Time{}, false
	}
	if !ok {
		return time.Time{}, false
	}
	at = later(at, scanNow.Add(minScanGap))
	if at.Sub(s.now()) >= s.opts.Tick {
		return time.Time{}, false
	}
	return at, true
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// sleepUntil waits until the clock reaches at; false when ctx or the lease
// ended first, or when the clock is still before at after three waits
// (the timer runs on the monotonic clock and at is a wall-clock time, so
// a wall clock slewed a little behind gets another short wait; a clock
// that does not follow real time gets no further).
func (s *Scheduler) sleepUntil(ctx, lease context.Context, at time.Time) bool {
	for range 3 {
		d := at.Sub(s.now())
		if d <= 0 {
			return true
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false
		case <-lease.Done():
			t.Stop()
			return false
		}
	}
	return !s.now().Before(at)
}

// finish completes one claim and accounts for it; false means it failed.
func (s *Scheduler) finish(lease context.Context, c ClaimTx) bool {
	res, err := c.Finish(lease)
	if err != nil {
		s.claimFailed(lease, err)
		return false
	}
	s.m.Claimed.Add(float64(res.Targets))
	s.m.OutboxInserted.Add(float64(res.Inserted))
	s.m.CatchUpTruncated.Add(float64(res.Truncated))
	if res.Broken > 0 {
		s.m.BrokenTargets.Add(float64(res.Broken))
		s.log.Error("paused targets whose stored schedule no longer parses", "count", res.Broken)
	}
	if res.Inserted > 0 {
		s.Wake()
	}
	return true
}

func (s *Scheduler) claimFailed(lease context.Context, err error) {
	if lease.Err() != nil {
		s.log.Warn("claim aborted: scan lock lost", "cause", context.Cause(lease))
		return
	}
	s.m.ClaimErrors.Inc()
	s.log.Error("claim due targets", "err", err)
}

// Wake asks the relay loop for a pass; it never blocks.
func (s *Scheduler) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Flush runs a relay pass now if this replica holds the lease and returns
// how many notifications it published (for tests and the final drain).
func (s *Scheduler) Flush(ctx context.Context) (int, error) {
	lease, ok := s.leader.Current()
	if !ok {
		return 0, nil
	}
	lctx, cancel := context.WithCancel(lease)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	return s.relay.Drain(lctx)
}

// relayLoop runs a relay pass on each wake-up while this replica holds the
// lease, and housekeeps the outbox now and then.
func (s *Scheduler) relayLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		}
		lease, ok := s.leader.Current()
		if !ok {
			continue
		}
		lctx, cancel := context.WithCancel(lease)
		stop := context.AfterFunc(ctx, cancel)
		if _, err := s.relay.Drain(lctx); err != nil && lease.Err() == nil && ctx.Err() == nil {
			s.log.Error("relay pass failed; rows stay in the outbox and are retried", "err", err)
		}
		s.housekeep(lctx)
		stop()
		cancel()
	}
}

// housekeep settles claimed one-shots whenever no tick is claiming and no
// relay pass is pending, and at
// most every housekeepEvery deletes published rows older than the
// retention and samples the backlog.
func (s *Scheduler) housekeep(ctx context.Context) {
	s.houseMu.Lock()
	defer s.houseMu.Unlock()
	const chunk, settleChunk = 10000, 5000
	// Settling is the claim's deferred work: between chunks it yields to a
	// scan and to a pending relay pass, so a flood is claimed and published
	// first and settled after. With nothing to settle it costs a few small
	// reads.
	for ctx.Err() == nil && !s.scanning.Load() && len(s.wake) == 0 {
		n, more, err := s.house.SettleOneShots(ctx, settleChunk)
		s.m.Settled.Add(float64(n))
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("settle claimed one-shots", "err", err)
			}
			break
		}
		if !more {
			break
		}
	}
	if time.Since(s.lastHouse) < s.opts.housekeepEvery {
		return
	}
	s.lastHouse = time.Now()
	before := s.now().Add(-s.opts.Retention)
	for ctx.Err() == nil {
		n, err := s.house.PurgePublished(ctx, before, chunk)
		if err != nil {
			s.log.Warn("purge published outbox rows", "err", err)
			break
		}
		s.m.Purged.Add(float64(n))
		if n < chunk {
			break
		}
	}
	if n, err := s.house.Backlog(ctx); err == nil {
		s.m.OutboxBacklog.Set(float64(n))
	} else if !errors.Is(err, context.Canceled) {
		s.log.Warn("measure outbox backlog", "err", err)
	}
}

// every is a cron.Schedule firing at a fixed interval; unlike
// cron.Every it allows intervals below one second.
type every time.Duration

func (e every) Next(t time.Time) time.Time { return t.Add(time.Duration(e)) }

// cronLogger sends robfig/cron's messages to slog; its "skip" (a tick
// still running) is routine, so info becomes debug.
type cronLogger struct{ log *slog.Logger }

func (l cronLogger) Info(msg string, kv ...any) { l.log.Debug("cron: "+msg, kv...) }
func (l cronLogger) Error(err error, msg string, kv ...any) {
	l.log.Error("cron: "+msg, append(kv, "err", err)...)
}
