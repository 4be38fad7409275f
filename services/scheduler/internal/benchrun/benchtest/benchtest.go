// Package benchtest helps the benchmark tests play the services the
// scheduler observes: it creates the sink's notifications table (with the
// sink's migrations) and writes rows and simulated-send counts the way the
// sink and the dispatcher do.
// Test code only.
package benchtest

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/notiflow/notiflow/lib/simsend"
	"github.com/notiflow/notiflow/services/sink/notifications"
)

// CreateSinkTable creates the sink's notifications table in db with the
// sink's own migrations (package notifications, the table's one owner).
func CreateSinkTable(tb testing.TB, db *sql.DB) {
	tb.Helper()
	if err := notifications.Migrate(context.Background(), db); err != nil {
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
		template_id, status, attempts, provider_code, error, body, run_id, due_at, dispatched_at, persisted_at, writer_schema) VALUES `)
	args := make([]any, 0, len(rows)*9)
	for i, r := range rows {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`(?, ?, ?, ?, 0, 'sim', 'bench', 'delivered', 1, 200, '', 'notiflow benchmark notification', ?, ?, ?, COALESCE(?, CURRENT_TIMESTAMP(6)), ` +
			strconv.Itoa(notifications.WriterSchema) + `)`)
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

// RecordSend counts one simulated send of (target, occurrence) the way the
// dispatcher's simulated provider does (lib/simsend's key and field).
func RecordSend(ctx context.Context, rdb redis.UniversalClient, prefix, runID string, target uint64, occurrence time.Time) error {
	return rdb.HIncrBy(ctx, simsend.Key(prefix, runID), simsend.Field(target, occurrence.UnixMicro()), 1).Err()
}
