// Package benchtest helps the benchmark tests play the services the
// scheduler observes: it creates the sink's notifications table and writes
// rows and simulated-send counts the way the sink and the dispatcher do.
// Test code only.
package benchtest

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// NotificationsDDL is the sink's notifications table (as versions 1 and 2
// of services/sink/internal/adapters/migrations.go leave it), which the
// benchmark reads; keep it in step with the sink.
const NotificationsDDL = `CREATE TABLE IF NOT EXISTS notifications (
	notification_id VARCHAR(64) CHARACTER SET ascii NOT NULL,
	target_id       BIGINT UNSIGNED NOT NULL,
	occurrence_at   DATETIME(6)  NOT NULL,
	recipient_id    VARCHAR(191) NOT NULL,
	sequence        BIGINT UNSIGNED NOT NULL,
	channel         VARCHAR(16)  NOT NULL,
	template_id     VARCHAR(191) NOT NULL,
	status          VARCHAR(16)  NOT NULL,
	attempts        INT UNSIGNED NOT NULL,
	provider_code   INT          NOT NULL,
	error           VARCHAR(1024) NOT NULL,
	body            TEXT         NOT NULL,
	run_id          VARCHAR(64)  NULL,
	due_at          DATETIME(6)  NOT NULL,
	dispatched_at   DATETIME(6)  NOT NULL,
	persisted_at    DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
	duplicates      INT UNSIGNED NOT NULL DEFAULT 0,
	from_duplicate  TINYINT(1)   NOT NULL DEFAULT 0,
	PRIMARY KEY (target_id, occurrence_at),
	UNIQUE KEY uq_notifications_notification (notification_id),
	KEY idx_notifications_recipient (recipient_id, dispatched_at DESC)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`

// CreateSinkTable creates the notifications table in db.
func CreateSinkTable(tb testing.TB, db *sql.DB) {
	tb.Helper()
	if _, err := db.Exec(NotificationsDDL); err != nil {
		tb.Fatalf("create notifications table: %v", err)
	}
}

// Row is a row the sink would write. PersistedAt zero lets the database
// set it (as the sink does).
type Row struct {
	NotificationID string
	TargetID       uint64
	OccurrenceAt   time.Time
	RecipientID    string
	RunID          string
	DueAt          time.Time
	DispatchedAt   time.Time
	PersistedAt    time.Time
}

// InsertRows writes rows with one multi-row INSERT (INSERT IGNORE, like the
// sink's idempotent upsert keeps one row per notification id).
func InsertRows(ctx context.Context, db *sql.DB, rows []Row) error {
	if len(rows) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString(`INSERT IGNORE INTO notifications (notification_id, target_id, occurrence_at, recipient_id, sequence, channel,
		template_id, status, attempts, provider_code, error, body, run_id, due_at, dispatched_at, persisted_at) VALUES `)
	args := make([]any, 0, len(rows)*9)
	for i, r := range rows {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`(?, ?, ?, ?, 0, 'sim', 'bench', 'delivered', 1, 200, '', 'notiflow benchmark notification', ?, ?, ?, COALESCE(?, CURRENT_TIMESTAMP(6)))`)
		var persisted sql.NullTime
		if !r.PersistedAt.IsZero() {
			persisted = sql.NullTime{Time: r.PersistedAt, Valid: true}
		}
		args = append(args, r.NotificationID, r.TargetID, r.OccurrenceAt, r.RecipientID, r.RunID, r.DueAt, r.DispatchedAt, persisted)
	}
	if _, err := db.ExecContext(ctx, b.String(), args...); err != nil {
		return fmt.Errorf("insert %d notifications: %w", len(rows), err)
	}
	return nil
}

// SimSendsKey is the dispatcher's hash of simulated sends of run runID
// under prefix (services/dispatcher/internal/adapters.SimSendsKey).
func SimSendsKey(prefix, runID string) string { return prefix + "sim:sends:" + runID }

// RecordSend counts one simulated send of (target, occurrence) the way the
// dispatcher's simulated provider does.
func RecordSend(ctx context.Context, rdb redis.UniversalClient, prefix, runID string, target uint64, occurrence time.Time) error {
	field := fmt.Sprintf("%d:%d", target, occurrence.UnixMicro())
	return rdb.HIncrBy(ctx, SimSendsKey(prefix, runID), field, 1).Err()
}
