package adapters

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notiflow/notiflow/lib/fence"
	"github.com/notiflow/notiflow/services/scheduler/internal/app"
	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

var (
	_ app.FenceSource = (*MySQLStore)(nil)
	_ app.FenceCache  = (*FenceCache)(nil)
)

// FencePage returns up to limit fences (target id -> version) of the
// targets changed through the API (fenced_at set) with an id above
// afterID, changed at or after since (zero: any time), in id order, and
// the last id read. Deleted targets are included: their notifications
// already on the way stay fenced.
func (s *MySQLStore) FencePage(ctx context.Context, afterID int64, since time.Time, limit int) (map[int64]uint64, int64, error) {
	q := `SELECT id, version FROM notification_targets WHERE id > ? AND fenced_at IS NOT NULL`
	args := []any{afterID}
	if !since.IsZero() {
		q = `SELECT id, version FROM notification_targets FORCE INDEX (idx_targets_fenced) WHERE id > ? AND fenced_at >= ?`
		args = append(args, since)
	}
	rows, err := s.db.QueryContext(ctx, q+` ORDER BY id LIMIT ?`, append(args, limit)...)
	if err != nil {
		return nil, 0, fmt.Errorf("read fences: %w", err)
	}
	defer rows.Close()
	out := make(map[int64]uint64, limit)
	last := afterID
	for rows.Next() {
		var (
			id int64
			v  uint64
		)
		if err := rows.Scan(&id, &v); err != nil {
			return nil, 0, fmt.Errorf("read fences: %w", err)
		}
		out[id], last = v, id
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("read fences: %w", err)
	}
	return out, last, nil
}

// DeletedVersion returns the version of target id when it is deleted;
// found is false when it does not exist or is not deleted.
func (s *MySQLStore) DeletedVersion(ctx context.Context, id int64) (uint64, bool, error) {
	var v uint64
	err := s.db.QueryRowContext(ctx, `SELECT version FROM notification_targets WHERE id = ? AND status = ?`,
		id, string(domain.StatusDeleted)).Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("read the version of deleted target %d: %w", id, err)
	}
	return v, true, nil
}

// FenceCache is the copy of the fences in Redis that the dispatcher
// checks (lib/fence owns its format). It is safe for concurrent use.
type FenceCache struct {
	rdb    *redis.Client
	prefix string
}

// NewFenceCache returns the cache under prefix (the dispatcher's
// NOTIFLOW_REDIS_PREFIX).
func NewFenceCache(rdb *redis.Client, prefix string) *FenceCache {
	return &FenceCache{rdb: rdb, prefix: prefix}
}

// Raise writes fences (target id -> version) in one pipeline, never
// lowering one.
func (c *FenceCache) Raise(ctx context.Context, fences map[int64]uint64) error {
	if len(fences) == 0 {
		return nil
	}
	cmds, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for id, v := range fences {
			_ = fence.Raise(ctx, p, c.prefix, uint64(id), v)
		}
		return nil
	})
	err = firstPipelineErr(cmds, err)
	if err != nil {
		return fmt.Errorf("write %d fences to redis: %w", len(fences), err)
	}
	return nil
}

// Inflight counts target's sends in progress.
func (c *FenceCache) Inflight(ctx context.Context, targetID int64) (int64, error) {
	return fence.Inflight(ctx, c.rdb, c.prefix, uint64(targetID))
}

// Synced reports whether the marker of a complete copy is in Redis.
func (c *FenceCache) Synced(ctx context.Context) (bool, error) {
	return fence.Synced(ctx, c.rdb, c.prefix)
}

// BeginSync starts a full copy under token.
func (c *FenceCache) BeginSync(ctx context.Context, token string) error {
	return fence.BeginSync(ctx, c.rdb, c.prefix, token)
}

// FinishSync sets the marker unless token's copy was interrupted.
func (c *FenceCache) FinishSync(ctx context.Context, token string) (bool, error) {
	return fence.FinishSync(ctx, c.rdb, c.prefix, token)
}
