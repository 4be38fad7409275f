package notifications_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/notiflow/notiflow/lib/testkit"
	"github.com/notiflow/notiflow/services/sink/notifications"
)

func openDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", testkit.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	ctx := context.Background()
	for range 2 {
		if err := notifications.Migrate(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	v, err := notifications.SchemaVersion(ctx, db)
	if want := len(notifications.Migrations()); err != nil || v != want {
		t.Fatalf("schema version %d, %v; want %d", v, err, want)
	}
}

// insert writes rows of targets from..to for run at due, persisted one
// second after due per target.
func insert(t *testing.T, db *sql.DB, run string, from, to uint64, due time.Time) {
	t.Helper()
	for id := from; id <= to; id++ {
		if _, err := db.Exec(`INSERT INTO notifications (notification_id, target_id, occurrence_at, recipient_id, sequence, channel,
			template_id, status, attempts, provider_code, error, body, run_id, due_at, dispatched_at, persisted_at, writer_schema)
			VALUES (?, ?, ?, 'r', 0, 'sim', 'bench', 'delivered', 1, 200, '', '', ?, ?, ?, ?, ?)`,
			fmt.Sprintf("%s-%d", run, id), id, due, run, due, due.Add(time.Second), due.Add(2*time.Second), notifications.WriterSchema); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRunsCountRowsDelete(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	ctx := context.Background()
	runs := notifications.NewRuns(db)
	span := notifications.Span{FromTarget: 10, ToTarget: 20, RunID: "run-a"}

	// Before the sink migrated: no rows, no error.
	if n, err := runs.Count(ctx, span); err != nil || n != 0 {
		t.Fatalf("count without the table = %d, %v", n, err)
	}
	if rows, err := runs.Rows(ctx, span); err != nil || len(rows) != 0 {
		t.Fatalf("rows without the table = %v, %v", rows, err)
	}
	if err := runs.Delete(ctx, span); err != nil {
		t.Fatalf("delete without the table: %v", err)
	}

	if err := notifications.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	due := time.Date(2026, 3, 9, 9, 0, 0, 123000, time.UTC)
	insert(t, db, "run-a", 10, 20, due)
	insert(t, db, "other", 15, 15, due.Add(time.Minute)) // another run's row inside the id range
	insert(t, db, "other", 21, 22, due)                  // and outside it

	tests := []struct {
		name string
		give notifications.Span
		want int64
	}{
		{"run in its range", span, 11},
		{"range alone", notifications.Span{FromTarget: 10, ToTarget: 20}, 12},
		{"part of the range", notifications.Span{FromTarget: 10, ToTarget: 12, RunID: "run-a"}, 3},
		{"no targets", notifications.Span{RunID: "run-a"}, 0},
	}
	for _, tt := range tests {
		n, err := runs.Count(ctx, tt.give)
		if err != nil || n != tt.want {
			t.Errorf("%s: count = %d, %v; want %d", tt.name, n, err, tt.want)
		}
	}
	rows, err := runs.Rows(ctx, span)
	if err != nil || len(rows) != 11 {
		t.Fatalf("rows = %d, %v; want 11", len(rows), err)
	}
	for _, r := range rows {
		if r.TargetID < 10 || r.TargetID > 20 || !r.OccurrenceAt.Equal(due) || !r.DueAt.Equal(due) ||
			!r.DispatchedAt.Equal(due.Add(time.Second)) || !r.PersistedAt.Equal(due.Add(2*time.Second)) {
			t.Fatalf("row %+v", r)
		}
	}
	if err := runs.Delete(ctx, span); err != nil {
		t.Fatal(err)
	}
	var left, others int64
	if err := db.QueryRow(`SELECT COALESCE(SUM(run_id = 'run-a'), 0), COALESCE(SUM(run_id = 'other'), 0) FROM notifications`).Scan(&left, &others); err != nil {
		t.Fatal(err)
	}
	if left != 0 || others != 3 {
		t.Fatalf("after delete: %d rows of the run, %d of the other; want 0 and 3", left, others)
	}
}
