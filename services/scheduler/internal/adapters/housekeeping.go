package adapters

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// PurgePublished deletes published rows created before before, looking at
// no more than the limit oldest rows, and returns how many it deleted; a
// result below limit means that nothing older is left. The row at the
// cursor is kept, so the outbox's auto-increment never falls back below
// the cursor, and so is every row SettleOneShots has not gone past yet.
func (s *MySQLStore) PurgePublished(ctx context.Context, before time.Time, limit int) (int64, error) {
	var upTo, settled uint64
	if err := s.db.QueryRowContext(ctx, `SELECT published_id, settled_id FROM outbox_relay WHERE id = 1`).Scan(&upTo, &settled); err != nil {
		return 0, fmt.Errorf("purge published outbox rows: read the cursors: %w", err)
	}
	if upTo == 0 {
		return 0, nil
	}
	// The window: the limit oldest rows, bounding the scan.
	var hi uint64
	err := s.db.QueryRowContext(ctx, `SELECT id FROM outbox ORDER BY id LIMIT 1 OFFSET ?`, limit-1).Scan(&hi)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		hi = upTo
	case err != nil:
		return 0, fmt.Errorf("purge published outbox rows: %w", err)
	}
	hi = min(hi, upTo-1, settled)
	res, err := s.db.ExecContext(ctx, `DELETE FROM outbox WHERE id <= ? AND created_at < ?`, hi, before)
	if err != nil {
		return 0, fmt.Errorf("purge published outbox rows: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("purge published outbox rows: %w", err)
	}
	return n, nil
}

// Backlog returns the number of outbox rows not yet published.
func (s *MySQLStore) Backlog(ctx context.Context) (int64, error) {
	var n int64
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM outbox WHERE id > (SELECT published_id FROM outbox_relay WHERE id = 1)`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count unpublished outbox rows: %w", err)
	}
	return n, nil
}
