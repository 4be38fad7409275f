package adapters

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"database/sql"
)

// SettleOneShots stores "done" for the one-shots that claims fired from
// their queue entries alone (see BeginClaim), going through the outbox rows
// after the settle cursor (outbox_relay.settled_id), at most limit rows
// per call, and moves the cursor past them. It returns how many targets it
// settled and whether rows after the cursor may remain. A target is
// settled only if it is still an active one-shot due at the row's
// occurrence without a queue entry, so running it twice, or beside a claim,
// is harmless. It reads no row above CommittedUpTo: the cursor never skips
// one.
//
// The candidates are found with a plain (non-locking) read; only their
// target rows are then locked, by one single-table UPDATE per claim time
// in a READ COMMITTED transaction, so settling never holds queue or outbox
// rows that claims and the API write.
func (s *MySQLStore) SettleOneShots(ctx context.Context, limit int) (settled int64, more bool, err error) {
	if limit <= 0 {
		return 0, false, fmt.Errorf("settle one-shots: limit %d, want > 0", limit)
	}
	var from uint64
	if err := s.db.QueryRowContext(ctx, `SELECT settled_id FROM outbox_relay WHERE id = 1`).Scan(&from); err != nil {
		return 0, false, fmt.Errorf("settle one-shots: read the cursor: %w", err)
	}
	end, err := s.CommittedUpTo(ctx)
	if err != nil {
		return 0, false, fmt.Errorf("settle one-shots: %w", err)
	}
	var hi uint64
	err = s.db.QueryRowContext(ctx, `SELECT id FROM outbox WHERE id > ? AND id <= ? ORDER BY id LIMIT 1 OFFSET ?`, from, end, limit-1).Scan(&hi)
	switch {
	case err == nil:
		more = hi < end
	case errors.Is(err, sql.ErrNoRows):
		hi = end
	default:
		return 0, false, fmt.Errorf("settle one-shots: find the window: %w", err)
	}
	if hi <= from {
		return 0, false, nil
	}
	byTime, err := s.unsettled(ctx, from, hi)
	if err != nil {
		return 0, false, err
	}
	if settled, err = s.settle(ctx, byTime); err != nil {
		return 0, false, err
	}
	if _, err := s.db.ExecContext(ctx, `UPDATE outbox_relay SET settled_id = GREATEST(settled_id, ?) WHERE id = 1`, hi); err != nil {
		return settled, false, fmt.Errorf("settle one-shots: move the cursor to %d: %w", hi, err)
	}
	return settled, more, nil
}

// unsettled returns, by claim time, the targets of the outbox rows from+1
// to hi that are active one-shots due at the row's occurrence without a
// queue entry (a consistent read: no locks).
func (s *MySQLStore) unsettled(ctx context.Context, from, hi uint64) (map[time.Time][]any, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT o.target_id, o.created_at FROM outbox o
		JOIN notification_targets t ON t.id = o.target_id
		WHERE o.id > ? AND o.id <= ? AND t.next_run_at = o.occurrence_at AND `+fired("t"), from, hi)
	if err != nil {
		return nil, fmt.Errorf("settle one-shots: read outbox rows %d..%d: %w", from+1, hi, err)
	}
	defer rows.Close()
	out := map[time.Time][]any{}
	for rows.Next() {
		var id int64
		var at time.Time
		if err := rows.Scan(&id, &at); err != nil {
			return nil, fmt.Errorf("settle one-shots: read outbox row: %w", err)
		}
		out[at] = append(out[at], id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("settle one-shots: read outbox rows %d..%d: %w", from+1, hi, err)
	}
	return out, nil
}

// settle stores "done" for the targets of byTime with their claim time as
// updated_at, in one READ COMMITTED transaction (record locks on the
// targets only), re-checking that each is still an active one-shot.
func (s *MySQLStore) settle(ctx context.Context, byTime map[time.Time][]any) (int64, error) {
	if len(byTime) == 0 {
		return 0, nil
	}
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, fmt.Errorf("settle one-shots: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var settled int64
	for at, ids := range byTime {
		var b strings.Builder
		b.WriteString(`UPDATE notification_targets SET status = 'done', updated_at = ?
			WHERE schedule_kind = 'once' AND status = 'active' AND id IN `)
		inList(&b, len(ids))
		res, err := tx.ExecContext(ctx, b.String(), append([]any{at}, ids...)...)
		if err != nil {
			return 0, fmt.Errorf("settle %d one-shots: %w", len(ids), err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, fmt.Errorf("settle one-shots: %w", err)
		}
		settled += n
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("settle one-shots: commit: %w", err)
	}
	return settled, nil
}
