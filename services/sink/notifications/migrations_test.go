package notifications

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/notiflow/notiflow/lib/mysqlx"
	"github.com/notiflow/notiflow/lib/testkit"
)

// openAtVersion3 opens a fresh database migrated to schema version 3.
func openAtVersion3(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", testkit.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := mysqlx.Migrate(context.Background(), db, MigrationTable, migrations[:3]); err != nil {
		t.Fatal(err)
	}
	return db
}

// TestInboxApartResumes: migration 4 run over a database that an
// interrupted run left half-way (writer_schema added, part of the entries
// copied, the inbox index already dropped, a count off) finishes the copy
// in chunks from where it stood, counts exactly, and running it again
// changes nothing.
func TestInboxApartResumes(t *testing.T) {
	ctx := context.Background()
	db := openAtVersion3(t)
	at := time.Date(2026, 3, 9, 9, 0, 0, 0, time.UTC)
	// Targets 1-30: inbox rows of bob (target 7 read, target 9 with two
	// occurrences), target 12 a sim row, target 20 ann's.
	for target := 1; target <= 30; target++ {
		occurrences, channel, recipient := 1, "inbox", "bob"
		switch target {
		case 9:
			occurrences = 2
		case 12:
			channel = "sim"
		case 20:
			recipient = "ann"
		}
		for o := range occurrences {
			occ := at.Add(time.Duration(o) * time.Hour)
			if _, err := db.ExecContext(ctx, `INSERT INTO notifications (notification_id, target_id, occurrence_at, recipient_id,
				sequence, channel, template_id, status, attempts, provider_code, error, body, due_at, dispatched_at)
				VALUES (?, ?, ?, ?, 0, ?, 't', 'delivered', 1, 200, '', 'b', ?, ?)`,
				fmt.Sprintf("n-%d-%d", target, o), target, occ, recipient, channel, occ, occ); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := db.ExecContext(ctx, `UPDATE notifications SET read_at = UTC_TIMESTAMP(6) WHERE target_id = 7`); err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The interrupted run: fenced, table created, targets 1-5 copied,
	// the index dropped, bob's count spoiled.
	for _, q := range []string{
		`ALTER TABLE notifications ADD COLUMN writer_schema TINYINT UNSIGNED NOT NULL`,
		`CREATE TABLE inbox_entries (target_id BIGINT UNSIGNED NOT NULL, occurrence_at DATETIME(6) NOT NULL,
			recipient_id VARCHAR(191) NOT NULL, persisted_at DATETIME(6) NOT NULL, read_at DATETIME(6) NULL,
			PRIMARY KEY (target_id, occurrence_at), KEY idx_inbox_entries_recipient (recipient_id, persisted_at))`,
		`INSERT INTO inbox_entries SELECT target_id, occurrence_at, recipient_id, persisted_at, read_at FROM notifications
			WHERE channel = 'inbox' AND target_id <= 5`,
		`ALTER TABLE notifications DROP INDEX idx_notifications_inbox`,
		`UPDATE inbox_unread SET unread = 999 WHERE recipient_id = 'bob'`,
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	defer func(n int) { copyChunk = n }(copyChunk)
	copyChunk = 4 // several chunks, one of them ending inside target 9's two rows
	var starts []string
	copyStarts = func(lo uint64, first bool) { starts = append(starts, fmt.Sprintf("after %d (first %v)", lo, first)) }
	defer func() { copyStarts = nil }()
	for run := range 2 {
		if err := inboxApart(ctx, conn); err != nil {
			t.Fatalf("run %d: %v", run+1, err)
		}
		var entries, read, mismatched int
		if err := conn.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(e.read_at IS NOT NULL), 0),
			COALESCE(SUM(e.recipient_id <> n.recipient_id OR e.persisted_at <> n.persisted_at OR n.channel <> 'inbox'), 0)
			FROM inbox_entries e JOIN notifications n ON n.target_id = e.target_id AND n.occurrence_at = e.occurrence_at`).
			Scan(&entries, &read, &mismatched); err != nil {
			t.Fatal(err)
		}
		if entries != 30 || read != 1 || mismatched != 0 {
			t.Fatalf("run %d: %d entries (%d read, %d unlike their row); want the 30 inbox rows, target 7's read", run+1, entries, read, mismatched)
		}
		reader := NewReader(db)
		bob, err := reader.UnreadCount(ctx, "bob")
		if err != nil {
			t.Fatal(err)
		}
		ann, err := reader.UnreadCount(ctx, "ann")
		if err != nil {
			t.Fatal(err)
		}
		if bob != 28 || ann != 1 {
			t.Fatalf("run %d: unread bob %d, ann %d; want 28 and 1", run+1, bob, ann)
		}
		if has, err := hasColumn(ctx, conn, "read_at"); err != nil || has {
			t.Fatalf("run %d: notifications.read_at still there (%v)", run+1, err)
		}
	}
	if len(starts) != 1 || starts[0] != "after 5 (first false)" {
		t.Fatalf("the copy started %v; want once, after target 5 (what the interrupted run had copied)", starts)
	}
}

// TestInboxApartCopiesTargetZero: a copy from scratch starts at the first
// target, 0 included.
func TestInboxApartCopiesTargetZero(t *testing.T) {
	ctx := context.Background()
	db := openAtVersion3(t)
	at := time.Date(2026, 3, 9, 9, 0, 0, 0, time.UTC)
	for _, target := range []int{0, 1} {
		if _, err := db.ExecContext(ctx, `INSERT INTO notifications (notification_id, target_id, occurrence_at, recipient_id,
			sequence, channel, template_id, status, attempts, provider_code, error, body, due_at, dispatched_at)
			VALUES (?, ?, ?, 'zoe', 0, 'inbox', 't', 'delivered', 1, 200, '', 'b', ?, ?)`,
			fmt.Sprintf("z-%d", target), target, at, at, at); err != nil {
			t.Fatal(err)
		}
	}
	if err := Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM inbox_entries WHERE target_id IN (0, 1)`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d entries of targets 0 and 1 (%v), want 2", n, err)
	}
	if unread, err := NewReader(db).UnreadCount(ctx, "zoe"); err != nil || unread != 2 {
		t.Fatalf("zoe unread %d (%v), want 2", unread, err)
	}
}
