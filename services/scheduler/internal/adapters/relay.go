package adapters

import (
	"context"
	"fmt"
	"time"

	"database/sql"
	"github.com/notiflow/notiflow/services/scheduler/internal/domain"
)

// PublishedUpTo returns the relay cursor: every outbox row with an id up
// to it was acknowledged by Kafka.
func (s *MySQLStore) PublishedUpTo(ctx context.Context) (uint64, error) {
	var id uint64
	if err := s.db.QueryRowContext(ctx, `SELECT published_id FROM outbox_relay WHERE id = 1`).Scan(&id); err != nil {
		return 0, fmt.Errorf("read the relay cursor: %w", err)
	}
	return id, nil
}

// CommittedUpTo returns the highest outbox id committed now: every row
// with an id up to it that will ever exist is committed and visible to
// any read that starts after CommittedUpTo returns, whatever the database
// shows of transactions still committing when a read's snapshot is taken.
//
// It holds the outbox_lock row in share mode in a short READ
// COMMITTED transaction while it reads MAX(id). Every outbox writer inserts
// and commits under that row's exclusive lock (see Finish), so while the
// share lock is held no writer is between its first insert and its
// commit, and the MAX(id) statement, whose snapshot is taken after the
// lock is granted, sees every row up to it; a writer that comes after
// draws higher ids (auto-increment values only grow). It waits for a claim
// that is finishing; when ctx ends it returns ctx's error.
func (s *MySQLStore) CommittedUpTo(ctx context.Context) (uint64, error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, fmt.Errorf("read the committed outbox end: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var one int
	if err := tx.QueryRowContext(ctx, `SELECT id FROM outbox_lock WHERE id = 1 LOCK IN SHARE MODE`).Scan(&one); err != nil {
		return 0, fmt.Errorf("read the committed outbox end: share the outbox lock: %w", err)
	}
	var hi uint64
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), 0) FROM outbox`).Scan(&hi); err != nil {
		return 0, fmt.Errorf("read the committed outbox end: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("read the committed outbox end: commit: %w", err)
	}
	return hi, nil
}

// Unpublished returns up to limit outbox rows with afterID < id <= upTo,
// in id order, as notifications (joined with their targets) whose
// Sequence is the outbox id and whose SecretRequired says whether the
// target has a webhook signing secret. A row's ID is
// domain.NotificationID, or domain.HashedNotificationID for a row at or
// below outbox_relay.ordered_ids_after (claimed under schema version 10
// or below: migration 11), so a row published again keeps its id.
// TargetVersion is the version the row was claimed under: a row at or
// below the target's fence_outbox_id was claimed before the target's last
// change, so it gets a version below the current one (see UpdateTarget).
// With upTo from CommittedUpTo, the rows returned are all the rows in
// their id range that will ever exist: a cursor moved past them never
// skips a row.
func (s *MySQLStore) Unpublished(ctx context.Context, afterID, upTo uint64, limit int) ([]domain.Notification, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT o.id, o.target_id, o.occurrence_at, o.run_id, o.created_at,
			IF(o.id <= t.fence_outbox_id, t.version - 1, t.version),
			t.created_at, t.recipient_id, t.channel, t.webhook_url, t.template_id, t.params,
			s.target_id IS NOT NULL, o.id > COALESCE(r.ordered_ids_after, ~0)
		FROM outbox o JOIN notification_targets t ON t.id = o.target_id
		LEFT JOIN webhook_secrets s ON s.target_id = o.target_id
		JOIN outbox_relay r ON r.id = 1
		WHERE o.id > ? AND o.id <= ? ORDER BY o.id LIMIT ?`, afterID, upTo, limit)
	if err != nil {
		return nil, fmt.Errorf("read unpublished outbox rows: %w", err)
	}
	defer rows.Close()
	out := make([]domain.Notification, 0, limit)
	for rows.Next() {
		var (
			n             domain.Notification
			targetCreated time.Time
			ch            string
			url, runID    sql.NullString
			ordered       bool
		)
		if err := rows.Scan(&n.Sequence, &n.TargetID, &n.OccurrenceAt, &runID, &n.CreatedAt, &n.TargetVersion,
			&targetCreated, &n.RecipientID, &ch, &url, &n.TemplateID, &n.Params, &n.SecretRequired, &ordered); err != nil {
			return nil, fmt.Errorf("read unpublished outbox row: %w", err)
		}
		if ordered {
			n.ID = domain.NotificationID(n.TargetID, targetCreated, n.OccurrenceAt)
		} else {
			n.ID = domain.HashedNotificationID(n.TargetID, targetCreated, n.OccurrenceAt)
		}
		n.DueAt = n.OccurrenceAt
		n.Channel, n.WebhookURL, n.RunID = domain.Channel(ch), url.String, runID.String
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read unpublished outbox rows: %w", err)
	}
	return out, nil
}

// MarkPublished moves the relay cursor to upTo: every row up to it was
// acknowledged. The cursor never moves back, so a late call from a former
// lock holder is harmless.
func (s *MySQLStore) MarkPublished(ctx context.Context, upTo uint64, at time.Time) error {
	_, err := s.db.ExecContext(ctx, `UPDATE outbox_relay SET published_id = GREATEST(published_id, ?), updated_at = ? WHERE id = 1`, upTo, at)
	if err != nil {
		return fmt.Errorf("mark outbox rows up to %d published: %w", upTo, err)
	}
	return nil
}

// RowIDs returns the ids of the outbox rows with afterID < id <= upTo, in
// order, from a fresh read.
func (s *MySQLStore) RowIDs(ctx context.Context, afterID, upTo uint64) ([]uint64, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id FROM outbox WHERE id > ? AND id <= ? ORDER BY id`, afterID, upTo)
	if err != nil {
		return nil, fmt.Errorf("read outbox ids %d..%d: %w", afterID+1, upTo, err)
	}
	defer rows.Close()
	var ids []uint64
	for rows.Next() {
		var id uint64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("read outbox id: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read outbox ids %d..%d: %w", afterID+1, upTo, err)
	}
	return ids, nil
}
