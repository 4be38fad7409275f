package adapters

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/notiflow/notiflow/services/scheduler/internal/app"
	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

var _ app.RunStore = (*MySQLStore)(nil)

// runChunk is the most target ids one statement over a benchmark run's
// targets covers (and one release transaction): small enough that no
// transaction outgrows InnoDB's lock table however large the run.
const runChunk = 10000

// runFilter returns the WHERE clause selecting rng's rows in a table whose
// key begins with target_id (the outbox's (target_id, occurrence_at)
// unique key), and its arguments.
func runFilter(rng domain.TargetRange) (string, []any) {
	if rng.Exclusive {
		return `target_id BETWEEN ? AND ?`, []any{rng.MinID, rng.MaxID}
	}
	return `target_id BETWEEN ? AND ? AND run_id = ?`, []any{rng.MinID, rng.MaxID, rng.RunID}
}

// ReleaseRun makes the held (paused) one-shot targets of rng active, due
// at at (updated at now), and queues them, in transactions of 10,000
// target ids; it returns how many it released. Each transaction commits
// its targets and their queue entries together, so the due queue stays in
// step; entries commit chunk by chunk, so at must lie after the last
// commit for the targets to fall due together. Targets of the run that
// are not held are left alone. When ctx ends, the chunks committed so far
// stay released.
func (s *MySQLStore) ReleaseRun(ctx context.Context, rng domain.TargetRange, at, now time.Time) (int64, error) {
	var released int64
	for lo := rng.MinID; rng.MaxID > 0 && lo <= rng.MaxID; lo += runChunk {
		hi := min(lo+runChunk-1, rng.MaxID)
		n, err := s.releaseChunk(ctx, rng.RunID, lo, hi, at, now)
		if err != nil {
			return released, fmt.Errorf("release the targets of run %s, ids %d..%d: %w", rng.RunID, lo, hi, err)
		}
		released += n
	}
	return released, nil
}

func (s *MySQLStore) releaseChunk(ctx context.Context, runID string, lo, hi uint64, at, now time.Time) (int64, error) {
	// READ COMMITTED: record locks only, no gap lock that would hold up
	// the API inserting targets after the run's.
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	res, err := tx.ExecContext(ctx, `UPDATE notification_targets SET status = ?, due_at = ?, next_run_at = ?, updated_at = ?
		WHERE id BETWEEN ? AND ? AND run_id = ? AND status = ? AND schedule_kind = ?`,
		string(domain.StatusActive), at, at, now, lo, hi, runID, string(domain.StatusPaused), string(domain.KindOnce))
	if err != nil {
		return 0, fmt.Errorf("activate: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil || n == 0 {
		return 0, err
	}
	// The rows the UPDATE changed (it holds their locks until the commit).
	if _, err := tx.ExecContext(ctx, `INSERT INTO target_due (next_run_at, target_id, one_shot, run_id)
		SELECT next_run_at, id, 1, run_id FROM notification_targets
		WHERE id BETWEEN ? AND ? AND run_id = ? AND status = ? AND schedule_kind = ? AND next_run_at = ? AND updated_at = ?
		ON DUPLICATE KEY UPDATE target_id = target_due.target_id`,
		lo, hi, runID, string(domain.StatusActive), string(domain.KindOnce), at, now); err != nil {
		return 0, fmt.Errorf("queue: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	return n, nil
}

// SampleRunOutbox counts rng's outbox rows and those the relay published,
// and reads when the relay cursor last moved. It reads READ UNCOMMITTED (a
// progress sample: no consistent-read version lookups on fresh rows).
func (s *MySQLStore) SampleRunOutbox(ctx context.Context, rng domain.TargetRange) (app.RunOutbox, error) {
	var out app.RunOutbox
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadUncommitted, ReadOnly: true})
	if err != nil {
		return out, fmt.Errorf("sample the outbox of run %s: begin: %w", rng.RunID, err)
	}
	defer func() { _ = tx.Rollback() }()
	var cursor uint64
	if err := tx.QueryRowContext(ctx, `SELECT published_id, updated_at FROM outbox_relay WHERE id = 1`).Scan(&cursor, &out.RelayUpdatedAt); err != nil {
		return out, fmt.Errorf("sample the outbox of run %s: read the relay cursor: %w", rng.RunID, err)
	}
	where, args := runFilter(rng)
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(id <= ?), 0) FROM outbox WHERE `+where,
		append([]any{cursor}, args...)...).Scan(&out.Rows, &out.Published); err != nil {
		return out, fmt.Errorf("sample the outbox of run %s: count rows: %w", rng.RunID, err)
	}
	return out, nil
}

// RunOutboxReport returns, committed, the number of rng's outbox rows and
// the latest of their created_at (zero without rows).
func (s *MySQLStore) RunOutboxReport(ctx context.Context, rng domain.TargetRange) (int64, time.Time, error) {
	where, args := runFilter(rng)
	var (
		n    int64
		last sql.NullTime
	)
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*), MAX(created_at) FROM outbox WHERE `+where, args...).Scan(&n, &last); err != nil {
		return 0, time.Time{}, fmt.Errorf("read the outbox rows of run %s: %w", rng.RunID, err)
	}
	return n, last.Time, nil
}

// DeleteRun deletes run rng's due-queue entries, targets, their webhook
// signing secrets and outbox rows, 10,000 rows per statement. The outbox row at the relay cursor is kept
// (as the relay's own purge does) so the outbox's auto-increment can never
// fall back below the cursor. A range without targets (MaxID 0) deletes
// the run's targets by run id alone. Rows written afterwards (records
// already in flight) are not deleted.
func (s *MySQLStore) DeleteRun(ctx context.Context, rng domain.TargetRange) error {
	if err := s.dequeueRun(ctx, rng); err != nil {
		return err
	}
	type stmt struct {
		what string
		q    string
		args []any
	}
	// A webhook run's signing secrets go first, found through their
	// targets.
	stmts := []stmt{
		{"webhook secrets", `DELETE FROM webhook_secrets WHERE target_id IN (SELECT id FROM notification_targets WHERE run_id = ?) LIMIT ?`, []any{rng.RunID}},
		{"targets", `DELETE FROM notification_targets WHERE run_id = ? LIMIT ?`, []any{rng.RunID}},
	}
	if rng.MaxID > 0 { // without a range there are no outbox rows either
		where, args := runFilter(rng)
		stmts = []stmt{
			{"webhook secrets", `DELETE FROM webhook_secrets WHERE target_id BETWEEN ? AND ? AND target_id IN
				(SELECT id FROM notification_targets WHERE id BETWEEN ? AND ? AND run_id = ?) LIMIT ?`, []any{rng.MinID, rng.MaxID, rng.MinID, rng.MaxID, rng.RunID}},
			{"targets", `DELETE FROM notification_targets WHERE id BETWEEN ? AND ? AND run_id = ? LIMIT ?`, []any{rng.MinID, rng.MaxID, rng.RunID}},
			{"outbox rows", `DELETE FROM outbox WHERE ` + where + ` AND id <> (SELECT published_id FROM outbox_relay WHERE id = 1) LIMIT ?`, args},
		}
	}
	for _, st := range stmts {
		args := append(st.args, runChunk)
		for {
			res, err := s.db.ExecContext(ctx, st.q, args...)
			if err != nil {
				return fmt.Errorf("delete the %s of run %s: %w", st.what, rng.RunID, err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return fmt.Errorf("delete the %s of run %s: %w", st.what, rng.RunID, err)
			}
			if n < runChunk {
				break
			}
		}
	}
	return nil
}

// dequeueRun deletes the due-queue entries of the run's targets still
// queued (a run deleted before its due time), found through their targets,
// 10,000 target ids per statement.
func (s *MySQLStore) dequeueRun(ctx context.Context, rng domain.TargetRange) error {
	const q = `DELETE d FROM target_due d JOIN notification_targets t ON d.next_run_at = t.next_run_at AND d.target_id = t.id
		WHERE t.run_id = ?`
	run := func(extra string, args ...any) error {
		if _, err := s.db.ExecContext(ctx, q+extra, append([]any{rng.RunID}, args...)...); err != nil {
			return fmt.Errorf("dequeue the targets of run %s: %w", rng.RunID, err)
		}
		return nil
	}
	if rng.MaxID == 0 {
		return run("")
	}
	for lo := rng.MinID; lo <= rng.MaxID; lo += runChunk {
		if err := run(` AND t.id BETWEEN ? AND ?`, lo, min(lo+runChunk-1, rng.MaxID)); err != nil {
			return err
		}
	}
	return nil
}
