package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// ErrFenceNotSettled: a target change is committed and its fence written,
// but a send of the target was still in progress when the wait ended (or
// the fence could not be written to Redis). The change stands; repeating
// the request is safe and waits again.
var ErrFenceNotSettled = errors.New("the change is stored but sends of the target may still be in progress")

// FenceSource reads the fences' source of truth (adapters.MySQLStore:
// notification_targets.version).
type FenceSource interface {
	// FencePage returns up to limit fences (target id -> version) of
	// targets with an id above afterID, changed at or after since (zero:
	// any time), and the last id read.
	FencePage(ctx context.Context, afterID int64, since time.Time, limit int) (map[int64]uint64, int64, error)
	// DBNow is the clock fenced_at is stamped with.
	DBNow(ctx context.Context) (time.Time, error)
}

// FenceCache is the copy of the fences the dispatcher checks
// (adapters.FenceCache over Redis, format lib/fence).
type FenceCache interface {
	// Raise writes fences, never lowering one.
	Raise(ctx context.Context, fences map[int64]uint64) error
	// Inflight counts target's sends in progress.
	Inflight(ctx context.Context, targetID int64) (int64, error)
	// Synced reports whether the marker of a complete copy is there.
	Synced(ctx context.Context) (bool, error)
	// BeginSync and FinishSync bracket a full copy; FinishSync sets the
	// marker and reports false when the copy was interrupted (a flush).
	BeginSync(ctx context.Context, token string) error
	FinishSync(ctx context.Context, token string) (bool, error)
}

// FencesOptions tune Fences (NOTIFLOW_FENCE_*).
type FencesOptions struct {
	// Wait bounds how long a change waits for the sends in progress of
	// its target; it must be positive.
	Wait time.Duration
	// Poll is the interval of that wait's checks (10 ms by default).
	Poll time.Duration
	// SyncEvery is how often Run checks and refreshes the Redis copy; it
	// must be positive for Run.
	SyncEvery time.Duration
}

// fencePage is how many fences one sync step reads and writes.
const fencePage = 1000

// Fences makes a target change win over its notifications already on the
// way. After the MySQL commit of a change (which raised the target's
// version), Settle writes the new version as the target's fence in Redis,
// where every dispatcher checks it atomically with its dedup claim and
// again before each webhook retry, then waits until no send of the target
// that passed the check before the fence is still in progress. Only then
// is the change acknowledged: from that moment no occurrence claimed under
// an older version is sent (the dispatcher records it CANCELLED).
//
// MySQL (notification_targets.version) is the source of truth; Run copies
// it to Redis at start, again in full whenever the marker of a complete
// copy is missing (a flushed or new Redis; until the marker is back, the
// dispatchers send nothing: fences fail closed), and incrementally every
// SyncEvery. It is safe for concurrent use.
type Fences struct {
	src   FenceSource
	cache FenceCache
	opt   FencesOptions
	log   *slog.Logger
	dirty atomic.Bool
}

// NewFences returns the fences service.
func NewFences(src FenceSource, cache FenceCache, opt FencesOptions, log *slog.Logger) *Fences {
	if opt.Poll <= 0 {
		opt.Poll = 10 * time.Millisecond
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Fences{src: src, cache: cache, opt: opt, log: log}
}

// Settle writes target's fence at version and waits, at most Wait, until
// no send of the target is in progress. It returns nil once that holds,
// or an error wrapping ErrFenceNotSettled (the fence stays; a retry
// settles again); when ctx ends it returns ctx's error.
func (f *Fences) Settle(ctx context.Context, targetID int64, version uint64) error {
	deadline := time.Now().Add(f.opt.Wait)
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if err := f.cache.Raise(wctx, map[int64]uint64{targetID: version}); err != nil {
		f.dirty.Store(true)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: write the fence of target %d: %w", ErrFenceNotSettled, targetID, err)
	}
	for {
		n, err := f.cache.Inflight(wctx, targetID)
		if err == nil && n == 0 {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().Add(f.opt.Poll).After(deadline) {
			if err != nil {
				return fmt.Errorf("%w: count the sends in progress of target %d: %w", ErrFenceNotSettled, targetID, err)
			}
			return fmt.Errorf("%w: %d send(s) of target %d still in progress after %s", ErrFenceNotSettled, n, targetID, f.opt.Wait)
		}
		t := time.NewTimer(f.opt.Poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Sync writes every fence changed at or after since (zero: all) to Redis.
func (f *Fences) Sync(ctx context.Context, since time.Time) error {
	for after := int64(0); ; {
		page, last, err := f.src.FencePage(ctx, after, since, fencePage)
		if err != nil {
			return err
		}
		if err := f.cache.Raise(ctx, page); err != nil {
			return err
		}
		if len(page) < fencePage {
			return nil
		}
		after = last
	}
}

// Run keeps the Redis copy in step until ctx ends, then returns nil: a
// full copy at start, when the marker is missing or after a failed write
// of Settle, else the fences changed since shortly before the previous
// pass, every SyncEvery. Failures are logged and retried. It returns an
// error only when SyncEvery is not positive.
func (f *Fences) Run(ctx context.Context) error {
	return keepCopy(ctx, "fences", f.opt.SyncEvery, 50*time.Millisecond, f.log,
		" (dispatchers send nothing while the copy is incomplete)", f.pass)
}

// pass runs one sync and returns the database time it started at.
func (f *Fences) pass(ctx context.Context, full bool, since time.Time) (time.Time, error) {
	start, err := f.src.DBNow(ctx)
	if err != nil {
		return time.Time{}, err
	}
	if !full {
		synced, err := f.cache.Synced(ctx)
		if err != nil {
			return time.Time{}, err
		}
		full = !synced || f.dirty.Load()
	}
	if !full {
		return start, f.Sync(ctx, since)
	}
	// Unlike the secrets' marker, this one goes last: with it a
	// dispatcher trusts an absent fence to mean "never changed". The
	// token makes a flush during the copy start it over.
	var b [8]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	f.dirty.Store(false)
	if err := f.cache.BeginSync(ctx, token); err != nil {
		f.dirty.Store(true)
		return time.Time{}, err
	}
	if err := f.Sync(ctx, time.Time{}); err != nil {
		f.dirty.Store(true)
		return time.Time{}, fmt.Errorf("full sync: %w", err)
	}
	ok, err := f.cache.FinishSync(ctx, token)
	if err == nil && !ok {
		err = errors.New("full sync: interrupted (redis flushed during the copy, or another replica began one)")
	}
	if err != nil {
		f.dirty.Store(true)
		return time.Time{}, err
	}
	return start, nil
}

// fence settles the fence of t, just changed, when fences are in use.
func (s *Targets) fence(ctx context.Context, t domain.Target) error {
	if s.fences == nil {
		return nil
	}
	return s.fences.Settle(ctx, t.ID, t.Version)
}
