package adapters

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// UpdateTarget locks target id and, if it is active, its due-queue entry
// (waiting for a claim that holds it), passes the target to change and
// stores what change returns, keeping the queue in step, in one
// transaction. An active one-shot whose entry is gone has fired: change
// sees it done. An error from change (e.g. wrapping domain.ErrConflict)
// rolls back and is returned; a missing or deleted target gives
// domain.ErrNotFound; a next run at the time of an occurrence of the
// target already in the outbox gives domain.ErrConflict (it would never
// fire: one occurrence per target and time).
//
// When change returns the target unchanged (same status, next run,
// UpdatedAt and definition) nothing is written and the stored target is returned.
// Otherwise the target's definition (webhook URL, template, params,
// schedule), status, next run and UpdatedAt are stored, its version is
// raised by one, fenced_at set to the database's clock and fence_outbox_id
// to the highest outbox id (the occurrences claimed so far), and its queue
// entry is replaced (active targets only): the returned target has the
// new version, which the caller writes as the target's fence (see
// app.Fences). The id, recipient, channel, run and
// creation time never change.
func (s *MySQLStore) UpdateTarget(ctx context.Context, id int64, change func(domain.Target) (domain.Target, error)) (domain.Target, error) {
	var out domain.Target
	err := s.gdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var r targetRow
		err := tx.Clauses(clause.Locking{Strength: "UPDATE"}).
			Where("id = ? AND status <> ?", id, string(domain.StatusDeleted)).Take(&r).Error
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return domain.ErrNotFound
		}
		if err != nil {
			return err
		}
		if r.Status == string(domain.StatusActive) {
			// Lock the target's queue entry: this waits for a claim that
			// holds it, and an active one-shot whose entry is gone fired.
			var queued int
			if err := tx.Raw(`SELECT COUNT(*) FROM target_due WHERE next_run_at = ? AND target_id = ? FOR UPDATE`,
				r.NextRunAt, id).Scan(&queued).Error; err != nil {
				return fmt.Errorf("lock the due-queue entry: %w", err)
			}
			r.Fired = queued == 0 && r.ScheduleKind == string(domain.KindOnce)
		}
		cur, err := s.toDomain(&r)
		if err != nil {
			return err
		}
		next, err := change(cur)
		if err != nil {
			return err
		}
		if unchanged(cur, next) {
			out = cur
			return nil
		}
		next.ID, next.RecipientID, next.Channel, next.RunID, next.CreatedAt = cur.ID, cur.RecipientID, cur.Channel, cur.RunID, cur.CreatedAt
		if next.Status == domain.StatusActive && !next.NextRunAt.Equal(cur.NextRunAt) {
			// One occurrence per target and time: a next run at the time
			// of an occurrence already claimed would never fire.
			var taken int
			if err := tx.Raw(`SELECT COUNT(*) FROM outbox WHERE target_id = ? AND occurrence_at = ?`, id, next.NextRunAt).Scan(&taken).Error; err != nil {
				return fmt.Errorf("look up the outbox: %w", err)
			}
			if taken > 0 {
				return fmt.Errorf("%w: due_at: the target already has an occurrence at %s; give another time",
					domain.ErrConflict, next.NextRunAt.UTC().Format(time.RFC3339Nano))
			}
		}
		next.Version = r.Version + 1
		// Every outbox row of this target claimed so far is committed
		// (the locks above wait for a claim holding the target or its
		// entry) and at or below this id; any later one gets a higher id.
		var fenceID uint64
		if err := tx.Raw(`SELECT COALESCE(MAX(id), 0) FROM outbox`).Scan(&fenceID).Error; err != nil {
			return fmt.Errorf("read the outbox high mark: %w", err)
		}
		var due sql.NullTime
		if next.Schedule.Kind() == domain.KindOnce {
			due = sql.NullTime{Time: next.Schedule.DueAt(), Valid: true}
		}
		err = tx.Exec(`UPDATE notification_targets SET webhook_url = ?, template_id = ?, params = ?, schedule_kind = ?,
			due_at = ?, cron_expr = ?, time_zone = ?, status = ?, next_run_at = ?, updated_at = ?,
			version = ?, fenced_at = UTC_TIMESTAMP(6), fence_outbox_id = ? WHERE id = ?`,
			nullString(next.WebhookURL), next.TemplateID, next.Params, string(next.Schedule.Kind()),
			due, nullString(next.Schedule.Expr()), nullString(next.Schedule.Zone()), string(next.Status), next.NextRunAt, next.UpdatedAt,
			next.Version, fenceID, id).Error
		if err != nil {
			return err
		}
		// Keep the due queue in step: the old entry goes, an active
		// target gets its new one, with the new version.
		if err := tx.Exec(`DELETE FROM target_due WHERE next_run_at = ? AND target_id = ?`, r.NextRunAt, id).Error; err != nil {
			return fmt.Errorf("dequeue: %w", err)
		}
		if next.Status == domain.StatusActive {
			// The transaction's connection (a *sql.Tx).
			if err := enqueueDue(ctx, tx.Statement.ConnPool, []dueEntry{queueEntry(next, id)}); err != nil {
				return err
			}
		}
		out = next
		return nil
	}, &sql.TxOptions{Isolation: sql.LevelReadCommitted}) // record locks only: no gap lock on the queue
	if err != nil {
		return domain.Target{}, fmt.Errorf("update target %d: %w", id, err)
	}
	return out, nil
}

// unchanged reports whether next stores exactly what cur holds.
func unchanged(cur, next domain.Target) bool {
	return next.Status == cur.Status && next.NextRunAt.Equal(cur.NextRunAt) && next.UpdatedAt.Equal(cur.UpdatedAt) &&
		next.SameDefinition(cur)
}
