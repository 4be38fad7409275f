package adapters

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notiflow/notiflow/lib/webhooksig"
	"github.com/notiflow/notiflow/services/scheduler/internal/app"
	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// insertSecrets stores the webhook secrets of the targets of chunk that
// carry one (ids[i] is chunk[i]'s id), as version 1, in tx.
func insertSecrets(ctx context.Context, tx *sql.Tx, chunk []domain.Target, ids []int64) error {
	var b strings.Builder
	var args []any
	for i, t := range chunk {
		if t.WebhookSecret == "" {
			continue
		}
		if len(args) > 0 {
			b.WriteString(",")
		}
		b.WriteString("(?, ?, 1, UTC_TIMESTAMP(6))")
		args = append(args, ids[i], t.WebhookSecret)
	}
	if len(args) == 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO webhook_secrets (target_id, secret, version, updated_at) VALUES `+b.String(), args...); err != nil {
		return fmt.Errorf("insert webhook secrets: %w", err)
	}
	return nil
}

// RotateSecret makes secret the current webhook secret of target id; its
// former secret stays valid until graceUntil. A target without a secret
// (created before targets had their own) gets its first one. graceUntil
// is kept to the millisecond, the precision of the Redis copy. It returns
// the new record; errors wrap domain.ErrNotFound (no such target, or
// deleted) and domain.ErrConflict (not a webhook target).
func (s *MySQLStore) RotateSecret(ctx context.Context, id int64, secret string, graceUntil time.Time) (webhooksig.Record, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return webhooksig.Record{}, fmt.Errorf("rotate webhook secret: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var ch string
	err = tx.QueryRowContext(ctx, `SELECT channel FROM notification_targets WHERE id = ? AND status <> ? FOR UPDATE`,
		id, string(domain.StatusDeleted)).Scan(&ch)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return webhooksig.Record{}, domain.ErrNotFound
	case err != nil:
		return webhooksig.Record{}, fmt.Errorf("rotate webhook secret: lock target: %w", err)
	case domain.Channel(ch) != domain.ChannelWebhook:
		return webhooksig.Record{}, fmt.Errorf("%w: channel %s has no webhook secret", domain.ErrConflict, ch)
	}
	rec := webhooksig.Record{Version: 1, Current: secret}
	var old string
	var version int64
	err = tx.QueryRowContext(ctx, `SELECT secret, version FROM webhook_secrets WHERE target_id = ? FOR UPDATE`, id).Scan(&old, &version)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		_, err = tx.ExecContext(ctx, `INSERT INTO webhook_secrets (target_id, secret, version, updated_at) VALUES (?, ?, 1, UTC_TIMESTAMP(6))`, id, secret)
	case err == nil:
		rec = webhooksig.Record{Version: version + 1, Current: secret, Previous: old, PreviousUntil: graceUntil.UTC().Truncate(time.Millisecond)}
		_, err = tx.ExecContext(ctx, `UPDATE webhook_secrets SET secret = ?, previous_secret = ?, previous_until = ?, version = ?,
			updated_at = UTC_TIMESTAMP(6) WHERE target_id = ?`, secret, old, rec.PreviousUntil, rec.Version, id)
	}
	if err != nil {
		return webhooksig.Record{}, fmt.Errorf("rotate webhook secret of target %d: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return webhooksig.Record{}, fmt.Errorf("rotate webhook secret: commit: %w", err)
	}
	return rec, nil
}

// secretColumns selects a webhook_secrets row (w) of a live target (t)
// as readSecrets reads it.
const secretColumns = `SELECT w.target_id, w.secret, w.previous_secret, w.previous_until, w.version
		FROM webhook_secrets w JOIN notification_targets t ON t.id = w.target_id
		WHERE t.status <> ? AND `

// SecretPage returns up to limit webhook secret records of targets that
// are not deleted, with a target id above afterID, in id order, and the
// last id read.
func (s *MySQLStore) SecretPage(ctx context.Context, afterID int64, limit int) (map[int64]webhooksig.Record, int64, error) {
	rows, err := s.db.QueryContext(ctx, secretColumns+`w.target_id > ? ORDER BY w.target_id LIMIT ?`,
		string(domain.StatusDeleted), afterID, limit)
	if err != nil {
		return nil, 0, fmt.Errorf("read webhook secrets: %w", err)
	}
	out, last, err := readSecrets(rows)
	if err != nil {
		return nil, 0, err
	}
	return out, max(last, afterID), nil
}

// SecretChanges returns up to limit (target id, version, updated_at) of
// the webhook_secrets rows updated after (at, afterID) in (updated_at,
// target_id) order: at a later updated_at, or at at itself with a target
// id above afterID. Rows of deleted targets are included. It reads only
// the index idx_webhook_secrets_changes, never a row's secrets.
func (s *MySQLStore) SecretChanges(ctx context.Context, at time.Time, afterID int64, limit int) ([]app.SecretChange, error) {
	at = at.UTC()
	rows, err := s.db.QueryContext(ctx, `SELECT target_id, version, updated_at FROM webhook_secrets
		WHERE updated_at > ? OR (updated_at = ? AND target_id > ?)
		ORDER BY updated_at, target_id LIMIT ?`, at, at, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("read webhook secret changes: %w", err)
	}
	defer rows.Close()
	out := make([]app.SecretChange, 0, limit)
	for rows.Next() {
		var c app.SecretChange
		if err := rows.Scan(&c.TargetID, &c.Version, &c.UpdatedAt); err != nil {
			return nil, fmt.Errorf("read webhook secret change: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read webhook secret changes: %w", err)
	}
	return out, nil
}

// SecretsOf returns the records of those of ids whose target is live
// (not deleted).
func (s *MySQLStore) SecretsOf(ctx context.Context, ids []int64) (map[int64]webhooksig.Record, error) {
	if len(ids) == 0 {
		return map[int64]webhooksig.Record{}, nil
	}
	var b strings.Builder
	b.WriteString(secretColumns + `w.target_id IN `)
	inList(&b, len(ids))
	args := make([]any, 0, len(ids)+1)
	args = append(args, string(domain.StatusDeleted))
	for _, id := range ids {
		args = append(args, id)
	}
	rows, err := s.db.QueryContext(ctx, b.String(), args...)
	if err != nil {
		return nil, fmt.Errorf("read %d webhook secrets: %w", len(ids), err)
	}
	out, _, err := readSecrets(rows)
	return out, err
}

// readSecrets reads and closes rows of secretColumns: the records by
// target id, and the last target id read (0: none).
func readSecrets(rows *sql.Rows) (map[int64]webhooksig.Record, int64, error) {
	defer rows.Close()
	out := map[int64]webhooksig.Record{}
	var last int64
	for rows.Next() {
		var (
			id    int64
			rec   webhooksig.Record
			prev  sql.NullString
			until sql.NullTime
		)
		if err := rows.Scan(&id, &rec.Current, &prev, &until, &rec.Version); err != nil {
			return nil, 0, fmt.Errorf("read webhook secret: %w", err)
		}
		rec.Previous, rec.PreviousUntil = prev.String, until.Time
		out[id], last = rec, id
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("read webhook secrets: %w", err)
	}
	return out, last, nil
}

// DBNow returns the database's clock (UTC), the one updated_at uses.
func (s *MySQLStore) DBNow(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := s.db.QueryRowContext(ctx, `SELECT UTC_TIMESTAMP(6)`).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("read the database clock: %w", err)
	}
	return now, nil
}

// SecretCache is the copy of the webhook secrets in Redis that the
// dispatcher reads (lib/webhooksig owns its format). It is safe for
// concurrent use.
type SecretCache struct {
	rdb    *redis.Client
	prefix string
}

// NewSecretCache returns the cache under prefix (the dispatcher's
// NOTIFLOW_REDIS_PREFIX).
func NewSecretCache(rdb *redis.Client, prefix string) *SecretCache {
	return &SecretCache{rdb: rdb, prefix: prefix}
}

// Put writes recs (target id -> record) in one pipeline; a record never
// replaces one of a higher version.
func (c *SecretCache) Put(ctx context.Context, recs map[int64]webhooksig.Record) error {
	if len(recs) == 0 {
		return nil
	}
	cmds, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for id, rec := range recs {
			_ = webhooksig.Store(ctx, p, c.prefix, uint64(id), rec)
		}
		return nil
	})
	err = firstPipelineErr(cmds, err)
	if err != nil {
		return fmt.Errorf("write %d webhook secrets to redis: %w", len(recs), err)
	}
	return nil
}

// Refresh writes the records of recs that Redis holds an older version of
// or none (webhooksig.StoreNewer): a sync's pass, which mostly finds its
// records in place, reads their versions instead of rewriting them all.
func (c *SecretCache) Refresh(ctx context.Context, recs map[int64]webhooksig.Record) error {
	byID := make(map[uint64]webhooksig.Record, len(recs))
	for id, rec := range recs {
		byID[uint64(id)] = rec
	}
	_, err := webhooksig.StoreNewer(ctx, c.rdb, c.prefix, byID)
	return err
}

// Synced reports whether the marker of a complete sync is in Redis.
func (c *SecretCache) Synced(ctx context.Context) (bool, error) {
	n, err := c.rdb.Exists(ctx, webhooksig.SyncedKey(c.prefix)).Result()
	if err != nil {
		return false, fmt.Errorf("read the webhook secrets sync marker: %w", err)
	}
	return n == 1, nil
}

// Server names the Redis server answering and its replication history:
// its run id (INFO server), which changes when it restarts, and its
// replication id (INFO replication), which changes when it is promoted,
// so that a failover and a fail-back to the same process both show. It
// needs the INFO command.
func (c *SecretCache) Server(ctx context.Context) (string, error) {
	info, err := c.rdb.InfoMap(ctx, "server", "replication").Result()
	if err != nil {
		return "", fmt.Errorf("read the redis server's run id: %w", err)
	}
	run, repl := info["Server"]["run_id"], info["Replication"]["master_replid"]
	if run == "" || repl == "" {
		return "", errors.New("read the redis server's run id: INFO has no run_id or master_replid")
	}
	return run + "/" + repl, nil
}

// MarkSynced sets the marker of a complete sync.
func (c *SecretCache) MarkSynced(ctx context.Context) error {
	if err := c.rdb.Set(ctx, webhooksig.SyncedKey(c.prefix), "1", 0).Err(); err != nil {
		return fmt.Errorf("set the webhook secrets sync marker: %w", err)
	}
	return nil
}
