package app

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
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
	// above afterID, and the last id read.
	SecretPage(ctx context.Context, afterID int64, limit int) (map[int64]webhooksig.Record, int64, error)
	// SecretChanges returns up to limit changes of records (deleted
	// targets' included) updated after (at, afterID) in (updated_at,
	// target id) order: at a later updated_at, or at at itself with a
	// target id above afterID.
	SecretChanges(ctx context.Context, at time.Time, afterID int64, limit int) ([]SecretChange, error)
	// SecretsOf returns the records of those of ids whose target is live.
	SecretsOf(ctx context.Context, ids []int64) (map[int64]webhooksig.Record, error)
	// DBNow is the clock updated_at is stamped with.
	DBNow(ctx context.Context) (time.Time, error)
}

// SecretChange is one entry of the secrets' change feed: a target's
// record is at Version since UpdatedAt.
type SecretChange struct {
	TargetID  int64
	Version   int64
	UpdatedAt time.Time
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
	// Server names the Redis server answering and its replication
	// history (run id and replication id): another name than before
	// means a restart or a failover, which may have lost writes the
	// marker survived.
	Server(ctx context.Context) (string, error)
	// MarkSynced sets that marker.
	MarkSynced(ctx context.Context) error
}

// syncMargin is how far back an incremental sync reaches before the start
// of the previous one: it covers a transaction that stamped updated_at and
// committed later.
const syncMargin = time.Minute

// secretPage is how many records one sync step reads and writes.
const secretPage = 1000

// changePage is how many entries of the change feed one step reads.
const changePage = 5000

// maxSeen bounds each of the maps of versions known to be in Redis
// (WebhookSecrets.seen and .written, about 10 MB each when full): past
// it, entries are not added and the records they would have named are
// read and checked again.
const maxSeen = 1 << 18

// fullEveryPasses: once the last full copy is this many passes' time old
// (the default of WebhookSecretsOptions.FullEvery, 10 minutes with the
// default SyncEvery), the next pass is a full copy, which writes back
// what Redis lost on its own since the last one.
const fullEveryPasses = 60

// WebhookSecretsOptions tune WebhookSecrets (from the scheduler's
// NOTIFLOW_WEBHOOK_SECRET_* settings).
type WebhookSecretsOptions struct {
	// Grace is how long a rotated-out secret stays valid; it must be
	// positive for Rotate.
	Grace time.Duration
	// SyncEvery is how often Run checks and refreshes the Redis copy; it
	// must be positive for Run.
	SyncEvery time.Duration
	// FullEvery: the first pass after the last full copy is this old is a
	// full copy; zero: 60 × SyncEvery.
	FullEvery time.Duration
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

	// seen: target id -> the version Redis was found at or brought to by
	// an incremental pass, for the records of the passes' window (older
	// ones are dropped); server: the Redis server the last full copy went
	// to; lastFull: the database time that copy started at. All three are
	// used by the pass alone (Run's goroutine).
	seen     map[int64]seenRecord
	server   string
	lastFull time.Time
	// mu guards written: target id -> the version this process wrote to
	// Redis after its commit (publish), until the next pass takes it.
	mu      sync.Mutex
	written map[int64]int64
}

// seenRecord is a version known to be in Redis and the updated_at (Unix
// µs) of the feed entry that named it: the entry is dropped once that is
// before the window.
type seenRecord struct {
	version   int64
	updatedUs int64
}

// NewWebhookSecrets returns the secrets service.
func NewWebhookSecrets(store SecretStore, cache SecretCache, opt WebhookSecretsOptions, log *slog.Logger) *WebhookSecrets {
	if opt.Clock == nil {
		opt.Clock = time.Now
	}
	if opt.FullEvery <= 0 {
		opt.FullEvery = fullEveryPasses * opt.SyncEvery
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
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.written == nil {
		w.written = map[int64]int64{}
	}
	for id, rec := range recs {
		if v, ok := w.written[id]; ok || len(w.written) < maxSeen {
			w.written[id] = max(v, rec.Version)
		}
	}
}

// SyncAll brings every record of a live target up to date in Redis: a
// record Redis holds at its version already is not written again, one
// Redis lost or holds at an older version is.
func (w *WebhookSecrets) SyncAll(ctx context.Context) error {
	for after := int64(0); ; {
		recs, last, err := w.store.SecretPage(ctx, after, secretPage)
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
// the marker of a complete sync is missing (Redis was flushed), another
// Redis server answers than at the last full sync (a restart or a
// failover, which may have lost writes the marker survived) or a write of
// this process failed (these, like the first pass, also forget the
// versions seen in Redis), or when the last full sync is FullEvery old (a
// key Redis lost on its own); else it brings up to date the versions
// written since shortly before its previous pass that it has not seen in
// Redis yet (syncChanges). Failures are logged and retried at the next
// pass. It returns an error only when SyncEvery is not positive. Run must
// not run twice at once on one WebhookSecrets.
func (w *WebhookSecrets) Run(ctx context.Context) error {
	return keepCopy(ctx, "webhook secrets", w.opt.SyncEvery, 100*time.Millisecond, w.log, "", w.pass)
}

// pass runs one sync and returns the database time it started at.
func (w *WebhookSecrets) pass(ctx context.Context, full bool, since time.Time) (time.Time, error) {
	start, err := w.store.DBNow(ctx)
	if err != nil {
		return time.Time{}, err
	}
	server, err := w.cache.Server(ctx)
	if err != nil {
		return time.Time{}, err
	}
	reset := full // the first pass, or one after a failed first pass
	if !full {
		synced, err := w.cache.Synced(ctx)
		if err != nil {
			return time.Time{}, err
		}
		reset = !synced || w.dirty.Load() || server != w.server
		full = reset || start.Sub(w.lastFull) >= w.opt.FullEvery
	}
	w.mu.Lock()
	written := w.written
	w.written = nil
	w.mu.Unlock()
	if !full {
		if err := w.syncChanges(ctx, since, written); err != nil {
			return time.Time{}, fmt.Errorf("incremental sync: %w", err)
		}
		return start, nil
	}
	if reset {
		w.seen = nil // what Redis held may be gone
	}
	// The marker goes first: a flush during the sync removes it again,
	// and the next pass starts over.
	w.dirty.Store(false)
	if err := w.cache.MarkSynced(ctx); err != nil {
		w.dirty.Store(true)
		return time.Time{}, err
	}
	if err := w.SyncAll(ctx); err != nil {
		w.dirty.Store(true)
		return time.Time{}, fmt.Errorf("full sync: %w", err)
	}
	w.server, w.lastFull = server, start
	return start, nil
}

// syncChanges is an incremental pass: it reads the change feed from since
// and brings up to date in Redis the records at a version it has not
// seen there yet, reading those records whole. A version counts as seen
// when an earlier pass found or wrote it (seen) or when this process
// wrote it after its commit (written, taken by this pass). So each change
// costs one entry of the feed per pass while it is in the window, and its
// record is read and checked in Redis once, not on every pass of the
// window. A record Redis loses on its own while its server keeps running
// (a DEL, an eviction) after it was seen or written is not written back
// by these passes but by the next full one (see Run).
func (w *WebhookSecrets) syncChanges(ctx context.Context, since time.Time, written map[int64]int64) error {
	sinceUs := since.UnixMicro()
	for id, s := range w.seen {
		if s.updatedUs < sinceUs {
			delete(w.seen, id)
		}
	}
	if len(w.seen) == 0 {
		w.seen = map[int64]seenRecord{} // a map keeps its size once grown
	}
	at, after := since, int64(0)
	for {
		changes, err := w.store.SecretChanges(ctx, at, after, changePage)
		if err != nil {
			return err
		}
		var check []SecretChange
		for _, c := range changes {
			if s, ok := w.seen[c.TargetID]; ok && s.version >= c.Version {
				continue
			}
			if v, ok := written[c.TargetID]; ok && v >= c.Version {
				w.see(c.TargetID, c.Version, c.UpdatedAt)
				continue
			}
			check = append(check, c)
		}
		for len(check) > 0 {
			n := min(len(check), secretPage)
			if err := w.check(ctx, check[:n]); err != nil {
				return err
			}
			check = check[n:]
		}
		if len(changes) < changePage {
			return nil
		}
		last := changes[len(changes)-1]
		at, after = last.UpdatedAt, last.TargetID
	}
}

// check reads the records of changes and writes to Redis those Redis
// holds at an older version or not at all, then counts them as seen.
func (w *WebhookSecrets) check(ctx context.Context, changes []SecretChange) error {
	ids := make([]int64, len(changes))
	for i, c := range changes {
		ids[i] = c.TargetID
	}
	recs, err := w.store.SecretsOf(ctx, ids)
	if err != nil {
		return err
	}
	if err := w.cache.Refresh(ctx, recs); err != nil {
		return err
	}
	for _, c := range changes {
		v := c.Version
		if rec, ok := recs[c.TargetID]; ok {
			v = rec.Version // read after the feed: it may be newer
		}
		w.see(c.TargetID, v, c.UpdatedAt)
	}
	return nil
}

// see counts target id's record at version as in Redis (or, for a
// deleted target, as not to be copied).
func (w *WebhookSecrets) see(id int64, version int64, updatedAt time.Time) {
	if _, ok := w.seen[id]; !ok && len(w.seen) >= maxSeen {
		return
	}
	w.seen[id] = seenRecord{version: version, updatedUs: updatedAt.UnixMicro()}
}
