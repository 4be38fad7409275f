package notifications

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
)

// errNoSuchTable is MySQL's error for a missing table: the sink has not
// migrated the database yet, which reads as no rows.
const errNoSuchTable = 1146

// deleteChunk is the most rows one DELETE removes.
const deleteChunk = 10000

// errDeadlock is InnoDB's deadlock error: the statement was rolled back.
const errDeadlock = 1213

func isDeadlock(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == errDeadlock
}

func noTable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == errNoSuchTable
}

// Span selects the rows of one benchmark run: those of the targets with
// ids FromTarget..ToTarget, and when RunID is set only those of that run
// (needed when other targets' ids fall in the range). Every query uses the
// primary key, which begins with target_id. A span with ToTarget 0
// selects nothing (a run without targets).
type Span struct {
	FromTarget, ToTarget uint64
	RunID                string
}

func (sp Span) where() (string, []any) {
	if sp.RunID == "" {
		return `target_id BETWEEN ? AND ?`, []any{sp.FromTarget, sp.ToTarget}
	}
	return `target_id BETWEEN ? AND ? AND run_id = ?`, []any{sp.FromTarget, sp.ToTarget, sp.RunID}
}

// Row is what a benchmark report needs of a stored notification.
type Row struct {
	TargetID     uint64
	OccurrenceAt time.Time
	DueAt        time.Time
	DispatchedAt time.Time
	PersistedAt  time.Time
}

// Runs reads and deletes the rows of benchmark runs. A missing table reads
// as no rows. It is safe for concurrent use.
type Runs struct {
	db *sql.DB
}

// NewRuns returns the reader over db (a go-sql-driver pool with parseTime
// and loc=UTC).
func NewRuns(db *sql.DB) *Runs { return &Runs{db: db} }

// Count returns the number of rows in sp. It reads READ UNCOMMITTED, so
// the sink's fresh rows need no consistent-read version lookups, at the
// price that a row of a sink statement that will still roll back may be
// counted: a progress sample, not a final figure (see Rows).
func (r *Runs) Count(ctx context.Context, sp Span) (int64, error) {
	if sp.ToTarget == 0 {
		return 0, nil
	}
	tx, err := r.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadUncommitted, ReadOnly: true})
	if err != nil {
		return 0, fmt.Errorf("count persisted notifications: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	where, args := sp.where()
	var n int64
	err = tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM notifications WHERE `+where, args...).Scan(&n)
	if err != nil && !noTable(err) {
		return 0, fmt.Errorf("count persisted notifications: %w", err)
	}
	return n, nil
}

// Rows returns the committed rows in sp, in no particular order.
func (r *Runs) Rows(ctx context.Context, sp Span) ([]Row, error) {
	if sp.ToTarget == 0 {
		return nil, nil
	}
	where, args := sp.where()
	rs, err := r.db.QueryContext(ctx, `SELECT target_id, occurrence_at, due_at, dispatched_at, persisted_at
		FROM notifications WHERE `+where, args...)
	if noTable(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read persisted notifications: %w", err)
	}
	defer rs.Close()
	var out []Row
	for rs.Next() {
		var row Row
		if err := rs.Scan(&row.TargetID, &row.OccurrenceAt, &row.DueAt, &row.DispatchedAt, &row.PersistedAt); err != nil {
			return nil, fmt.Errorf("read persisted notification: %w", err)
		}
		out = append(out, row)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("read persisted notifications: %w", err)
	}
	return out, nil
}

// Delete deletes the rows in sp, 10,000 per statement. Rows the sink
// writes afterwards are not deleted.
func (r *Runs) Delete(ctx context.Context, sp Span) error {
	if sp.ToTarget == 0 {
		return nil
	}
	where, args := sp.where()
	args = append(args, deleteChunk)
	for {
		res, err := r.db.ExecContext(ctx, `DELETE FROM notifications WHERE `+where+` LIMIT ?`, args...)
		if noTable(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("delete persisted notifications: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("delete persisted notifications: %w", err)
		}
		if n < deleteChunk {
			return nil
		}
	}
}
