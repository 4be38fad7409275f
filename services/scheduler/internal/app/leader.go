package app

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// Mutex is the part of a *redsync.Mutex the Leader uses. Its methods are
// not safe for concurrent use.
type Mutex interface {
	TryLockContext(ctx context.Context) error
	ExtendContext(ctx context.Context) (bool, error)
	UnlockContext(ctx context.Context) (bool, error)
	Until() time.Time
}

// RedisMutexes returns a factory of redsync mutexes named key with expiry
// ttl on rdb. Each call makes a new mutex, so each acquisition gets a fresh
// random value: a value is never reused across acquisitions.
func RedisMutexes(rdb redis.UniversalClient, key string, ttl time.Duration) func() Mutex {
	rs := redsync.New(goredis.NewPool(rdb))
	return func() Mutex {
		return rs.NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(1))
	}
}

// Lease causes: why a lease context ended.
var (
	ErrLeaseLost     = errors.New("scan lock lost: extend failed")
	ErrLeaseExpired  = errors.New("scan lock expired before it was extended")
	errLeaseReleased = errors.New("scan lock released")
)

// Leader holds this replica's lease on the scan mutex. While the lease is
// held a goroutine extends the mutex every ttl/3; the first failed extend
// (the key expired or was taken over, or Redis is unreachable) ends the
// lease's context at once, and a timer ends it when the mutex's validity
// runs out even if an extend hangs. Work done under the lease uses that
// context, so it stops as soon as the lock is gone. redsync has no fencing
// token: a paused holder may still act on a lock it lost, which is why
// correctness never depends on the lease (the outbox's unique key does).
//
// A Leader is safe for concurrent use.
type Leader struct {
	newMutex func() Mutex
	ttl      time.Duration
	log      *slog.Logger
	m        *Metrics

	mu  sync.Mutex
	cur *lease
}

type lease struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	mutex  Mutex
	done   chan struct{} // closed when the extender has returned
	lost   sync.Once
}

// NewLeader returns a Leader taking mutexes from newMutex (see
// RedisMutexes) whose expiry is ttl.
func NewLeader(newMutex func() Mutex, ttl time.Duration, log *slog.Logger, m *Metrics) *Leader {
	return &Leader{newMutex: newMutex, ttl: ttl, log: log, m: m}
}

// Acquire returns the context of this replica's lease, trying once to
// take the mutex when no lease is held. ok is false when another replica
// holds the mutex or Redis failed (logged). The lease context does not end
// with ctx (which only bounds the attempt): it ends when the lock is lost
// or released.
func (l *Leader) Acquire(ctx context.Context) (leaseCtx context.Context, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur != nil {
		if l.cur.ctx.Err() == nil {
			return l.cur.ctx, true
		}
		// Lost since the last call: clean up before trying again.
		l.endLocked(ctx)
	}
	m := l.newMutex()
	actx, cancel := context.WithTimeout(ctx, l.ttl/3)
	err := m.TryLockContext(actx)
	cancel()
	if err != nil {
		var taken *redsync.ErrTaken
		if !errors.Is(err, redsync.ErrFailed) && !errors.As(err, &taken) {
			l.log.Warn("scan lock: acquire failed", "err", err)
		}
		return nil, false
	}
	lctx, lcancel := context.WithCancelCause(context.Background())
	le := &lease{ctx: lctx, cancel: lcancel, mutex: m, done: make(chan struct{})}
	l.cur = le
	l.m.LockHeld.Set(1)
	l.log.Info("scan lock acquired", "until", m.Until())
	go l.extend(le)
	return lctx, true
}

// Current returns the lease context if this replica holds the lease now.
func (l *Leader) Current() (context.Context, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == nil || l.cur.ctx.Err() != nil {
		return nil, false
	}
	return l.cur.ctx, true
}

// extend keeps le alive until its context ends; it is the only goroutine
// touching le.mutex until it returns.
func (l *Leader) extend(le *lease) {
	defer close(le.done)
	lose := func(cause, err error) {
		le.lost.Do(func() {
			le.cancel(cause)
			l.m.LockLost.Inc()
			l.m.LockHeld.Set(0)
			l.log.Warn("scan lock lost: scanning stops", "cause", cause, "err", err)
		})
	}
	expire := time.AfterFunc(time.Until(le.mutex.Until()), func() { lose(ErrLeaseExpired, nil) })
	defer expire.Stop()
	tick := time.NewTicker(l.ttl / 3)
	defer tick.Stop()
	for {
		select {
		case <-le.ctx.Done():
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(le.ctx, l.ttl/3)
		ok, err := le.mutex.ExtendContext(ctx)
		cancel()
		if le.ctx.Err() != nil {
			return
		}
		if !ok || err != nil {
			lose(ErrLeaseLost, err)
			return
		}
		expire.Reset(time.Until(le.mutex.Until()))
	}
}

// Release ends the lease, if any, and deletes the mutex in Redis (when it
// is still ours) so that another replica can take over at its next tick
// rather than after the expiry. ctx bounds the unlock.
func (l *Leader) Release(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.endLocked(ctx)
}

func (l *Leader) endLocked(ctx context.Context) {
	le := l.cur
	if le == nil {
		return
	}
	l.cur = nil
	lost := le.ctx.Err() != nil
	le.cancel(errLeaseReleased)
	<-le.done
	l.m.LockHeld.Set(0)
	uctx, cancel := context.WithTimeout(ctx, l.ttl/3)
	defer cancel()
	if _, err := le.mutex.UnlockContext(uctx); err != nil && !lost {
		l.log.Warn("scan lock: release failed; it expires by itself", "err", err)
		return
	}
	if !lost {
		l.log.Info("scan lock released")
	}
}
