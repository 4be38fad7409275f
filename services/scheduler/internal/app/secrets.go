package app

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/notiflow/notiflow/lib/webhooksig"
	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// SecretStore keeps the webhook signing secrets, their owner
// (adapters.MySQLStore, table webhook_secrets).
type SecretStore interface {
	// RotateSecret makes secret the target's current secret, the former
	// one valid until graceUntil, and returns the new record (errors wrap
	// domain.ErrNotFound or domain.ErrConflict).
	RotateSecret(ctx context.Context, id int64, secret string, graceUntil time.Time) (webhooksig.Record, error)
	// SecretPage returns up to limit records of live targets with an id
	// above afterID and updated at or after since, and the last id read.
	SecretPage(ctx context.Context, afterID int64, since time.Time, limit int) (map[int64]webhooksig.Record, int64, error)
	// DBNow is the clock updated_at is stamped with.
	DBNow(ctx context.Context) (time.Time, error)
}

// SecretCache is the copy of the secrets the dispatcher reads
// (adapters.SecretCache over Redis).
type SecretCache interface {
	// Put writes records, never replacing one of a higher version.
	Put(ctx context.Context, recs map[int64]webhooksig.Record) error
	// Refresh writes the records it holds an older version of or none,
	// and leaves the others as they are.
	Refresh(ctx context.Context, recs map[int64]webhooksig.Record) error
	// Synced reports whether the marker of a complete sync is there.
	Synced(ctx context.Context) (bool, error)
	// MarkSynced sets that marker.
	MarkSynced(ctx context.Context) error
}

// syncMargin is how far back an incremental sync reaches before the start
// of the previous one: it covers a transaction that stamped updated_at and
// committed later.
const syncMargin = time.Minute

// secretPage is how many records one sync step reads and writes.
const secretPage = 1000

// WebhookSecretsOptions tune WebhookSecrets (from the scheduler's
// NOTIFLOW_WEBHOOK_SECRET_* settings).
type WebhookSecretsOptions struct {
	// Grace is how long a rotated-out secret stays valid; it must be
	// positive for Rotate.
	Grace time.Duration
	// SyncEvery is how often Run checks and refreshes the Redis copy; it
	// must be positive for Run.
	SyncEvery time.Duration
	// Clock is the clock (tests); time.Now by default.
	Clock func() time.Time
}

// WebhookSecrets is the use-case layer of the targets' webhook signing
// secrets: it rotates them and keeps their Redis copy, from which the
// dispatcher signs, in step with MySQL, their source of truth.
//
// A secret is written to Redis after its MySQL commit, in the request that
// made it: the commit decides (the client is given the secret only once
// it is durable), and Redis cannot hold a secret MySQL never committed. When
// that write fails the request still succeeds: Run writes the record at its
// next pass. Meanwhile a dispatcher signs a new target's webhooks with
// nothing (it finds no secret and retries, never sends unsigned) and a
// rotated target's with the former secret, which stays valid for Grace,
// far longer than a pass. It is safe for concurrent use.
type WebhookSecrets struct {
	store SecretStore
	cache SecretCache
	opt   WebhookSecretsOptions
	log   *slog.Logger
	// dirty: a write to Redis failed; the next pass syncs everything.
	dirty atomic.Bool
}

// NewWebhookSecrets returns the secrets service.
func NewWebhookSecrets(store SecretStore, cache SecretCache, opt WebhookSecretsOptions, log *slog.Logger) *WebhookSecrets {
	if opt.Clock == nil {
		opt.Clock = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &WebhookSecrets{store: store, cache: cache, opt: opt, log: log}
}

// Rotate gives webhook target id a new secret and returns its record: the
// new secret is Current, the former one stays valid until PreviousUntil.
// Errors wrap domain.ErrNotFound and domain.ErrConflict (not a webhook
// target).
func (w *WebhookSecrets) Rotate(ctx context.Context, id int64) (webhooksig.Record, error) {
	if w.opt.Grace <= 0 {
		return webhooksig.Record{}, fmt.Errorf("rotate webhook secret: grace period %s is not positive", w.opt.Grace)
	}
	secret, err := webhooksig.Generate()
	if err != nil {
		return webhooksig.Record{}, err
	}
	rec, err := w.store.RotateSecret(ctx, id, secret, w.opt.Clock().Add(w.opt.Grace))
	if err != nil {
		return webhooksig.Record{}, err
	}
	w.publish(ctx, map[int64]webhooksig.Record{id: rec})
	return rec, nil
}

// created writes the secrets of targets just committed (ids[i] is
// targets[i]'s id) to Redis.
func (w *WebhookSecrets) created(ctx context.Context, targets []domain.Target, ids []int64) {
	recs := map[int64]webhooksig.Record{}
	for i, t := range targets {
		if t.WebhookSecret != "" {
			recs[ids[i]] = webhooksig.Record{Version: 1, Current: t.WebhookSecret}
		}
	}
	w.publish(ctx, recs)
}

func (w *WebhookSecrets) publish(ctx context.Context, recs map[int64]webhooksig.Record) {
	if len(recs) == 0 {
		return
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := w.cache.Put(pctx, recs); err != nil {
		w.dirty.Store(true)
		w.log.Warn("webhook secrets not written to redis; the next sync writes them", "targets", len(recs), "err", err)
	}
}

// Sync brings every record updated at or after since (zero: all) up to
// date in Redis: a record Redis holds at its version already is not
// written again (each pass re-reads the last syncMargin, which after a
// bulk create is every record it made), one Redis lost or holds at an
// older version is.
func (w *WebhookSecrets) Sync(ctx context.Context, since time.Time) error {
	for after := int64(0); ; {
		recs, last, err := w.store.SecretPage(ctx, after, since, secretPage)
		if err != nil {
			return err
		}
		if err := w.cache.Refresh(ctx, recs); err != nil {
			return err
		}
		if len(recs) < secretPage {
			return nil
		}
		after = last
	}
}

// Run keeps Redis in step until ctx ends, then returns nil. It syncs
// everything at start, and every SyncEvery it syncs everything again when
// the marker of a complete sync is missing (Redis was flushed or
// replaced) or a write of this process failed, else the records updated
// since shortly before its previous pass. Failures are logged and retried
// at the next pass. It returns an error only when SyncEvery is not
// positive.
func (w *WebhookSecrets) Run(ctx context.Context) error {
	return keepCopy(ctx, "webhook secrets", w.opt.SyncEvery, 100*time.Millisecond, w.log, "", w.pass)
}

// pass runs one sync and returns the database time it started at.
func (w *WebhookSecrets) pass(ctx context.Context, full bool, since time.Time) (time.Time, error) {
	start, err := w.store.DBNow(ctx)
	if err != nil {
		return time.Time{}, err
	}
	if !full {
		synced, err := w.cache.Synced(ctx)
		if err != nil {
			return time.Time{}, err
		}
		full = !synced || w.dirty.Load()
	}
	if !full {
		return start, w.Sync(ctx, since)
	}
	// The marker goes first: a flush during the sync removes it again,
	// and the next pass starts over.
	w.dirty.Store(false)
	if err := w.cache.MarkSynced(ctx); err != nil {
		w.dirty.Store(true)
		return time.Time{}, err
	}
	if err := w.Sync(ctx, time.Time{}); err != nil {
		w.dirty.Store(true)
		return time.Time{}, fmt.Errorf("full sync: %w", err)
	}
	return start, nil
}
